"""Three real ``llmroute serve`` replicas behind a real nginx running the reference config of
``deploy/nginx/llmroute.conf`` (docs/deploy.md), sharing a real redis-server; clients talk
to nginx only. A replica killed mid-stream cuts its own streams (never a false ``[DONE]``)
and no other; the next requests succeed (nginx skips the dead replica). ``llmroute reload``
on every replica adds and removes a backend, and a rolling restart (SIGTERM, the drain's 503
that nginx retries elsewhere, a new process on the same port) of all three fails no
request."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fakes.fleet import ENV, Replica, create_key, fleet_config
from tests.fakes.nginx import MISSING, Nginx, find_nginx
from tests.fakes.redis import free_port
from tests.fakes.upstream import serve_upstream

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
pytestmark = pytest.mark.slow


@pytest.fixture
def nginx_binary() -> str:
    """The nginx binary; skips without one."""
    binary = find_nginx()
    if binary is None:
        pytest.skip(MISSING)
    return binary


@contextlib.asynccontextmanager
async def behind_nginx(folder: Path, config: Path, binary: str,
                       n: int = 3) -> AsyncIterator[tuple[Nginx, list[Replica]]]:
    """``n`` replicas of ``config`` behind nginx; on exit nginx stops and every replica still
    running is stopped (SIGTERM) and asserted to exit 0. The list may be changed (a replica
    replaced by a new process on its port)."""
    replicas = [Replica(config, free_port()) for _ in range(n)]
    (folder / "nginx").mkdir()
    lb = Nginx(binary, folder / "nginx", [r.port for r in replicas])
    try:
        await asyncio.gather(*[asyncio.to_thread(r.wait_ready) for r in replicas])
        await asyncio.to_thread(lb.start)
        yield lb, replicas
    finally:
        lb.stop()
        running = [r for r in replicas if r.proc.poll() is None]
        codes = [r.stop() for r in running]
        assert codes == [0] * len(running), [r.log_text() for r in running]


def _complete(body: str) -> bool:
    """True when an SSE body carries a finish_reason and ends with ``[DONE]``."""
    events = [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]
    finished = any(c.get("finish_reason") for e in events[:-1]
                   for c in json.loads(e).get("choices", []))
    return bool(events) and events[-1] == "[DONE]" and finished


async def _ask(client: httpx.AsyncClient, url: str, key: str, stream: bool) -> str:
    """One request through ``url``: ``ok`` when answered whole, else what went wrong."""
    auth = {"authorization": f"Bearer {key}"}
    try:
        if not stream:
            r = await client.post(url + "/v1/chat/completions", json=CHAT, headers=auth)
            whole = r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
            return "ok" if whole else f"{r.status_code} {r.text[:300]}"
        async with client.stream("POST", url + "/v1/chat/completions", headers=auth,
                                 json={**CHAT, "stream": True}) as r:
            body = "".join([part async for part in r.aiter_text()])
        return "ok" if r.status_code == 200 and _complete(body) else f"{r.status_code} {body}"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"


async def _lanes(client: httpx.AsyncClient, url: str, key: str, stop: asyncio.Event,
                 lanes: int = 6) -> list[str]:
    """``lanes`` clients each asking one request after another, 50 ms apart (even lanes
    stream), until ``stop``; every outcome."""
    async def lane(i: int) -> list[str]:
        out = []
        while not stop.is_set():
            out.append(await _ask(client, url, key, i % 2 == 0))
            await asyncio.sleep(0.05)  # a steady load, not a CPU-bound one
        return out

    return [o for outs in await asyncio.gather(*[lane(i) for i in range(lanes)]) for o in outs]


async def _watched_stream(client: httpx.AsyncClient, url: str, key: str,
                          first: asyncio.Queue[int]) -> tuple[int, str, str | None]:
    """One stream through nginx: (the replica's port, the body read, the error if any); the
    port goes to ``first`` once the first chunk arrived."""
    port, body, error = 0, "", None
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json={
                **CHAT, "stream": True}, headers={"authorization": f"Bearer {key}"}) as r:
            port = int(r.headers["x-upstream-addr"].rsplit(":", 1)[1])
            async for part in r.aiter_text():
                if not body:
                    await first.put(port)
                body += part
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    return port, body, error


async def test_a_replica_killed_mid_stream_cuts_only_its_own_streams(
        tmp_path, redis_server, nginx_binary):
    async with serve_upstream([("stall", 2.0)]) as up:
        config = fleet_config(tmp_path, redis_server.url, [{"id": "a", "base_url": up.base_url}])
        key = create_key(config)
        async with behind_nginx(tmp_path, config, nginx_binary) as (lb, replicas), \
                httpx.AsyncClient(timeout=30) as client:
            first: asyncio.Queue[int] = asyncio.Queue()
            streams = [asyncio.create_task(_watched_stream(client, lb.url, key, first))
                       for _ in range(6)]
            under_way = [await asyncio.wait_for(first.get(), 30) for _ in streams]
            victim_port = collections.Counter(under_way).most_common(1)[0][0]
            dead = next(r for r in replicas if r.port == victim_port)
            dead.proc.kill()
            dead.proc.wait()
            results = await asyncio.gather(*streams)
            up.script[:] = ["ok"]
            after = await asyncio.gather(*[_ask(client, lb.url, key, i % 2 == 0)
                                           for i in range(9)])
            after += [await _ask(client, lb.url, key, i % 2 == 0) for i in range(6)]
    cut = [(body, err) for port, body, err in results if port == victim_port]
    whole = [(body, err) for port, body, err in results if port != victim_port]
    assert cut and whole, results
    assert all(err is not None or not _complete(body) for body, err in cut), cut
    assert all(err is None and _complete(body) for body, err in whole), whole
    assert after == ["ok"] * 15, after
    assert any(status == 200 and "," in tried for status, tried in lb.access())  # retried


def _set_backends(config: Path, backends: dict[str, str]) -> None:
    """Rewrite the backends of ``config`` to ``{id: base_url}`` (the rest unchanged)."""
    data = yaml.safe_load(config.read_text())
    data["backends"] = [{"id": i, "base_url": u, "pool": "general", "engine": "openai",
                         "model": "m"} for i, u in backends.items()]
    config.write_text(yaml.safe_dump(data))


async def _quiet(upstream, quiet_s: float = 0.5, limit_s: float = 10.0) -> None:
    """Wait until ``upstream`` has received no new request for ``quiet_s`` seconds (at most
    ``limit_s``)."""
    deadline = time.monotonic() + limit_s
    seen, since = len(upstream.requests), time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "the removed backend kept receiving requests"
        await asyncio.sleep(0.05)
        if len(upstream.requests) != seen:
            seen, since = len(upstream.requests), time.monotonic()


def _reload(replica: Replica) -> dict:
    """``llmroute reload`` against ``replica``, as the operator would; its JSON answer."""
    done = subprocess.run([sys.executable, "-m", "llmroute.cli.main", "reload", "--url",
                           replica.url], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_reload_on_every_replica_adds_and_removes_a_backend_without_a_failed_request(
        tmp_path, redis_server, nginx_binary):
    async with serve_upstream([("stall", 0.3)]) as a, \
            serve_upstream([("stall", 0.3)]) as b:
        config = fleet_config(tmp_path, redis_server.url, [{"id": "a", "base_url": a.base_url}])
        key = create_key(config)
        async with behind_nginx(tmp_path, config, nginx_binary) as (lb, replicas), \
                httpx.AsyncClient(timeout=30) as client:
            stop = asyncio.Event()
            load = asyncio.create_task(_lanes(client, lb.url, key, stop))
            await asyncio.sleep(1.0)
            _set_backends(config, {"a": a.base_url, "b": b.base_url})
            added = [await asyncio.to_thread(_reload, r) for r in replicas]
            await asyncio.sleep(1.0)
            _set_backends(config, {"b": b.base_url})
            removed = [await asyncio.to_thread(_reload, r) for r in replicas]
            await _quiet(a)  # requests routed to a before the reloads have reached it
            on_a, on_b = len(a.requests), len(b.requests)
            await asyncio.sleep(1.0)
            stop.set()
            outcomes = await load
    assert [r["added"] for r in added] == [["b"]] * 3, added
    assert [r["removed"] for r in removed] == [["a"]] * 3, removed
    bad = [o for o in outcomes if o != "ok"]
    assert bad == [] and len(outcomes) > 30, (bad, len(outcomes))
    assert len(a.requests) == on_a and a.cancelled == 0  # drained, its streams finished
    assert len(b.requests) > on_b > 0


async def test_a_rolling_restart_of_every_replica_fails_no_request(
        tmp_path, redis_server, nginx_binary):
    async with serve_upstream([("stall", 0.3)]) as up:
        config = fleet_config(tmp_path, redis_server.url, [{"id": "a", "base_url": up.base_url}],
                              server={"drain_delay_s": 1.0, "drain_timeout_s": 10})
        key = create_key(config)
        async with behind_nginx(tmp_path, config, nginx_binary) as (lb, replicas), \
                httpx.AsyncClient(timeout=30) as client:
            stop = asyncio.Event()
            load = asyncio.create_task(_lanes(client, lb.url, key, stop))
            await asyncio.sleep(1.0)
            codes = []
            for i, old in enumerate(list(replicas)):
                codes.append(await asyncio.to_thread(old.stop))  # SIGTERM: drain, exit
                replicas[i] = Replica(config, old.port, log=tmp_path / f"again-{old.port}.log")
                await asyncio.to_thread(replicas[i].wait_ready)
                await asyncio.sleep(0.5)
            stop.set()
            outcomes = await load
    assert codes == [0, 0, 0]
    bad = [o for o in outcomes if o != "ok"]
    assert bad == [] and len(outcomes) > 30, (bad, len(outcomes))
    logged = lb.access()
    assert {status for status, _ in logged} == {200}, logged
    assert any("503" in tried for _, tried in logged)  # a draining replica's refusal, retried
