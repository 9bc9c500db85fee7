"""Backends change without a restart (``assemble/reload.py``): real HTTP on loopback, a real
uvicorn server, scripted upstreams. ``POST /admin/reload`` adds and drains backends with
no failed request under load; a long stream on a removed backend runs to its end; an
invalid config or an unhealthy new backend is refused and the old set keeps serving.
The process tests (``SIGHUP`` and ``llmroute reload`` against ``llmroute serve``) are slow.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from llmroute.assemble.generations import Generations
from llmroute.assemble.reload import Reloader
from llmroute.assemble.runtime import open_runtime
from llmroute.config import load_config
from tests.fakes.upstream import serve_upstream

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
SRC = Path(__file__).resolve().parents[2] / "src"


def write_config(path: Path, backends: dict[str, str]) -> None:
    """A config of one pool ``p`` over ``{id: base_url}``, gate off."""
    rows = "".join(f"  - {{id: {i}, pool: p, engine: openai, model: m, base_url: \"{u}\"}}\n"
                   for i, u in backends.items())
    path.write_text(f"gate: {{kind: off}}\npools: {{p: {{}}}}\nbackends:\n{rows}"
                    "routing: {default_pool: p}\n")


@contextlib.asynccontextmanager
async def served(path: Path) -> AsyncIterator[tuple[str, Reloader]]:
    """The router of the config at ``path`` on a loopback port, reloadable."""
    config = load_config(path)
    gens = Generations()
    async with open_runtime(config, None, gens) as rt:
        app = create_app(config, runtime=rt)
        app.reloader = reloader = Reloader(app, None, gens, health_timeout_s=1.0,
                                                 drain_timeout_s=10.0)
        async with serve_in_background(app) as url:
            yield url, reloader


async def _one(client: httpx.AsyncClient, url: str, stream: bool) -> bool:
    """One request; True when it was answered whole."""
    if not stream:
        resp = await client.post(url + "/v1/chat/completions", json=CHAT)
        return resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]
    async with client.stream("POST", url + "/v1/chat/completions",
                             json={**CHAT, "stream": True}) as resp:
        body = "".join([part async for part in resp.aiter_text()])
    return resp.status_code == 200 and body.rstrip().endswith("data: [DONE]")


async def _load(client: httpx.AsyncClient, url: str, stream: bool, stop: asyncio.Event,
                failed: list[int], done: list[int]) -> None:
    while not stop.is_set():
        if await _one(client, url, stream):
            done.append(1)
        else:
            failed.append(1)


def _drained(reloader: Reloader, upstream):
    """A check: the reload's old generation is retired and ``upstream`` has been reached."""
    async def check() -> bool:
        return not reloader.draining and len(upstream.requests) > 0
    return check


def _grown(upstream, count: int):
    """A check: ``upstream`` has received at least ``count`` requests."""
    async def check() -> bool:
        return len(upstream.requests) >= count
    return check


async def test_reload_adds_one_backend_and_drains_another_under_load(tmp_path):
    path = tmp_path / "llmroute.yaml"
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        write_config(path, {"a": a.base_url})
        async with served(path) as (url, reloader), httpx.AsyncClient(timeout=10) as client:
            stop, failed, done = asyncio.Event(), [], []
            clients = [asyncio.create_task(_load(client, url, i % 2 == 0, stop, failed, done))
                       for i in range(4)]
            await asyncio.sleep(0.4)
            write_config(path, {"b": b.base_url})
            answer = await client.post(url + "/admin/reload")
            await _until(_drained(reloader, b))  # old generation retired, b serving
            on_a = len(a.requests)
            before_b = len(b.requests)
            await _until(_grown(b, before_b + 10))
            stop.set()
            await asyncio.gather(*clients)
            metrics = (await client.get(url + "/metrics")).text
            while reloader.draining:
                await asyncio.sleep(0.02)
    assert answer.status_code == 200, answer.text
    assert answer.json() | {"kept": []} == {
        "object": "reload", "outcome": "applied", "added": ["b"], "removed": ["a"],
        "changed": [], "kept": [], "ignored": []}
    assert failed == [] and len(done) > 20
    assert len(a.requests) == on_a  # drained: nothing new reaches the removed backend
    assert len(b.requests) > before_b > 0
    assert 'llmroute_breaker_state{backend="b"}' in metrics
    assert 'llmroute_breaker_state{backend="a"}' not in metrics
    assert 'backend="b"' in metrics.split("llmroute_requests_total", 1)[1]


async def test_a_long_stream_on_a_removed_backend_finishes(tmp_path):
    path = tmp_path / "llmroute.yaml"
    async with serve_upstream([("stall", 1.2)]) as a, serve_upstream(["ok"]) as b:
        write_config(path, {"a": a.base_url})
        async with served(path) as (url, reloader), httpx.AsyncClient(timeout=10) as client:
            streaming = asyncio.create_task(_one(client, url, True))
            while not a.requests:
                await asyncio.sleep(0.01)
            write_config(path, {"b": b.base_url})
            answer = await client.post(url + "/admin/reload")
            assert not streaming.done() and len(reloader.draining) == 1
            assert await _one(client, url, False)
            assert await streaming  # whole, up to [DONE]
            started = time.monotonic()
            while reloader.draining:
                await asyncio.sleep(0.02)
    assert answer.json()["removed"] == ["a"]
    assert time.monotonic() - started < 1.0  # retired once its last stream ended
    assert a.cancelled == 0 and len(a.requests) == 1 and len(b.requests) == 1


async def test_an_invalid_config_or_an_unhealthy_backend_keeps_the_old_set(tmp_path):
    path = tmp_path / "llmroute.yaml"
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        write_config(path, {"a": a.base_url})
        async with served(path) as (url, _), httpx.AsyncClient(timeout=10) as client:
            path.write_text(path.read_text().replace("model: m, ", "modell: m, "))
            invalid = await client.post(url + "/admin/reload")
            b.healthy = False
            write_config(path, {"a": a.base_url, "b": b.base_url})
            sick = await client.post(url + "/admin/reload")
            assert await _one(client, url, False)
    assert invalid.status_code == 400
    error = invalid.json()["error"]
    assert error["code"] == "invalid_config" and error["type"] == "invalid_request_error"
    assert f"{path}:4: backends.0.modell" in error["message"]
    assert sick.status_code == 400 and sick.json()["error"]["code"] == "backend_unhealthy"
    assert "backend b" in sick.json()["error"]["message"]
    assert len(a.requests) == 1 and b.requests == []


async def test_an_id_reused_for_another_url_is_a_change(tmp_path):
    path = tmp_path / "llmroute.yaml"
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        write_config(path, {"a": a.base_url})
        async with served(path) as (url, _), httpx.AsyncClient(timeout=10) as client:
            same = await client.post(url + "/admin/reload")
            write_config(path, {"a": b.base_url})
            changed = await client.post(url + "/admin/reload")
            assert await _one(client, url, True)
    assert same.json()["outcome"] == "unchanged" and same.json()["kept"] == ["a"]
    assert changed.json()["changed"] == ["a"] and changed.json()["outcome"] == "applied"
    assert a.requests == [] and len(b.requests) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _llmroute(*args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-m", "llmroute.cli.main", *args], env=env,
                            text=True, **kw)  # type: ignore[call-overload]


async def _until(check, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_sighup_and_the_reload_command_on_a_real_serve_process(tmp_path):
    path = tmp_path / "llmroute.yaml"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        write_config(path, {"a": a.base_url})
        proc = _llmroute("serve", "--config", str(path), "--port", str(port),
                         "--log-level", "warning", stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                async def up() -> bool:
                    with contextlib.suppress(httpx.HTTPError):
                        return (await client.get(url + "/ready")).status_code == 200
                    return False

                async def on(upstream) -> bool:
                    before = len(upstream.requests)
                    return await _one(client, url, False) and len(upstream.requests) > before

                await _until(up, 60)
                assert await on(a)
                write_config(path, {"b": b.base_url})
                proc.send_signal(signal.SIGHUP)
                await _until(lambda: on(b))
                write_config(path, {"a": a.base_url})
                cli = await asyncio.to_thread(subprocess.run, [
                    sys.executable, "-m", "llmroute.cli.main", "reload", "--url", url],
                    env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True,
                    text=True, timeout=60)
                assert cli.returncode == 0, cli.stderr
                assert '"added": [\n    "a"\n  ]' in cli.stdout
                assert await on(a)
                path.write_text("pools: [")
                bad = await asyncio.to_thread(subprocess.run, [
                    sys.executable, "-m", "llmroute.cli.main", "reload", "--url", url],
                    env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True,
                    text=True, timeout=60)
                assert bad.returncode == 1 and f"{path}:" in bad.stderr
                proc.send_signal(signal.SIGHUP)  # refused and logged; still serving
                await asyncio.sleep(0.3)
                assert await on(a) and proc.poll() is None
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = await asyncio.to_thread(proc.communicate, timeout=30)
    assert "reload_refused" in err


async def test_a_reload_keeps_what_the_router_learned_of_unchanged_backends(tmp_path):
    path = tmp_path / "llmroute.yaml"
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b, \
            serve_upstream(["ok"]) as c:
        urls = {"a": a.base_url, "b": b.base_url}
        write_config(path, urls)
        async with served(path) as (url, reloader), httpx.AsyncClient(timeout=10) as client:
            for _ in range(6):
                assert await _one(client, url, False)
            before = reloader.target.state.runtime.stats.snapshot(0.0).stats
            kept = max(urls, key=lambda i: before[i].window_requests)  # one that learned
            changed = "b" if kept == "a" else "a"
            write_config(path, {**urls, changed: c.base_url})
            outcome = (await client.post(url + "/admin/reload")).json()
            after = reloader.target.state.runtime.stats.snapshot(0.0).stats
    assert outcome["kept"] == [kept] and outcome["changed"] == [changed]
    assert before["a"].window_requests + before["b"].window_requests == 6
    assert after[kept].window_requests == before[kept].window_requests > 0
    assert after[kept].latency_ms == before[kept].latency_ms is not None
    assert after[changed].window_requests == 0 and after[changed].latency_ms is None
