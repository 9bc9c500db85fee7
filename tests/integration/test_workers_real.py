"""``llmroute serve --workers N``: N real processes share one port (SO_REUSEPORT) and, through
a real redis-server, the limits; without Redis, or with launched engines, the command
refuses in one line (exit 2); SIGTERM to the parent drains every worker and exits 0."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
import psutil
import pytest
from tests.fakes.fleet import ENV, Replica, create_key, fleet_config
from tests.fakes.procs import alive
from tests.fakes.redis import free_port

from tests.fakes.upstream import serve_upstream

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def _workers_of(parent_pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(parent_pid)], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


async def _until_listening(pids: list[int], port: int, timeout_s: float = 90.0) -> None:
    """Wait until every process in ``pids`` listens on ``port``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not all(any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                      for c in psutil.Process(pid).net_connections(kind="tcp"))
                  for pid in pids):
        assert loop.time() < deadline, "a worker never listened"
        await asyncio.sleep(0.1)


def _upstream_connections(pid: int, upstream_url: str) -> int:
    """Open TCP connections from process ``pid`` to the upstream (kept alive after use)."""
    port = int(upstream_url.rsplit(":", 1)[1])
    return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp")
               if c.raddr and c.raddr.port == port)


@pytest.mark.parametrize("state, backend, words", [
    ({"kind": "memory"}, {"base_url": "http://127.0.0.1:9"}, "needs a shared state store"),
    ("redis", {"launch": {}, "engine": "llamacpp"}, "use launch; every worker"),
], ids=["no-redis", "launch"])
def test_workers_refuse_in_one_line(tmp_path, state, backend, words):
    url = "redis://127.0.0.1:9/0"
    config = fleet_config(tmp_path, url, [{"id": "a", **backend}],
                          **({} if state == "redis" else {"state": state}))
    done = subprocess.run([sys.executable, "-m", "llmroute.cli.main", "serve", "--config",
                           str(config), "--workers", "2", "--port", str(free_port())],
                          capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr


@pytest.mark.slow
async def test_two_workers_share_the_port_and_the_limit_then_drain_on_sigterm(
        tmp_path, redis_server):
    async with serve_upstream(["ok"]) as up:
        config = fleet_config(tmp_path, redis_server.url, [{"id": "a", "base_url": up.base_url}])
        key, free = create_key(config, "--rpm", "20"), create_key(config)
        parent = Replica(config, free_port(), "--workers", "2")
        try:
            await asyncio.to_thread(parent.wait_ready)
            workers = _workers_of(parent.proc.pid)
            assert len(workers) == 2
            await _until_listening(workers, parent.port)
            async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(
                    max_keepalive_connections=0)) as client:  # a new connection each: both workers
                async def burst(secret: str) -> list[httpx.Response]:
                    return await asyncio.gather(*[
                        client.post(parent.url + "/v1/chat/completions", json=CHAT,
                                    headers={"authorization": f"Bearer {secret}"})
                        for _ in range(40)])
                # without a limit every request reaches the upstream, from both workers (with
                # the limit, whichever worker admits the 20 first may serve them all)
                unlimited = await burst(free)
                served = [_upstream_connections(pid, up.base_url) for pid in workers]
                replies = await burst(key)
        finally:
            status = parent.stop()
        log = parent.log_text()
    assert [r.status_code for r in unlimited] == [200] * 40
    codes = sorted(r.status_code for r in replies)
    assert codes.count(200) in (20, 21), codes  # one shared bucket, not 20 per worker
    assert set(codes) == {200, 429}
    assert all(served), served  # both workers sent requests upstream
    assert status == 0, log
    assert not any(alive(pid) for pid in workers)
