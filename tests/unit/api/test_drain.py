"""Graceful shutdown: on SIGTERM the router refuses new requests with 503 + Retry-After and
fails ``/ready`` while streams already accepted run to their end; then it stops, and
``llmroute serve`` stops its engines and exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx
import pytest
import uvicorn

from llmroute.api.app import create_app
from llmroute.api.drain import Drain
from llmroute.api.server import _Server, bind_socket
from llmroute.assemble.runtime import make_backends, wire
from tests.fakes.router import make_config
from tests.fakes.upstream import serve_upstream

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
SRC = Path(__file__).resolve().parents[3] / "src"


def test_drain_begins_once_and_keeps_its_start():
    d = Drain()
    assert not d.active and d.elapsed(100.0) == 0.0
    assert d.begin(10.0) and d.active
    assert not d.begin(20.0)
    assert d.since == 10.0 and d.elapsed(12.5) == 2.5


async def _serving(app, delay_s: float, timeout_s: float | None):
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            access_log=False, lifespan="off",
                            timeout_graceful_shutdown=timeout_s)
    server = _Server(config, app.drain, delay_s)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not task.done(), task
        await asyncio.sleep(0.02)
    return server, task, f"http://127.0.0.1:{port}"


async def _stream_text(client: httpx.AsyncClient, url: str) -> tuple[str, float]:
    async with client.stream("POST", url + "/v1/chat/completions",
                             json={**CHAT, "stream": True}) as resp:
        assert resp.status_code == 200
        body = "".join([part async for part in resp.aiter_text()])
    return body, time.monotonic()


async def test_sigterm_refuses_new_requests_and_finishes_the_open_stream():
    async with serve_upstream([("stall", 1.0)]) as up, aiohttp.ClientSession() as session:
        config = make_config([{"id": "a", "pool": "p", "model": "m", "base_url": up.base_url}])
        app = create_app(config, runtime=wire(config, make_backends(config, {}), session))
        server, task, url = await _serving(app, delay_s=0.6, timeout_s=10)
        async with httpx.AsyncClient(timeout=10) as client:
            assert (await client.get(url + "/ready")).status_code == 200
            streaming = asyncio.create_task(_stream_text(client, url))
            while not up.requests:
                await asyncio.sleep(0.01)
            server.handle_exit(signal.SIGTERM, None)
            refused = await client.post(url + "/v1/chat/completions", json=CHAT)
            ready = await client.get(url + "/ready")
            health = await client.get(url + "/health")
            body, ended = await streaming
        await asyncio.wait_for(task, 10)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "server_shutting_down"
    assert refused.json()["error"]["type"] == "service_unavailable"
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["connection"] == "close"
    assert ready.status_code == 503 and ready.json()["status"] == "draining"
    assert health.status_code == 200  # alive: a liveness probe must not restart it
    assert '"finish_reason":"stop"' in body.replace(" ", "") and body.endswith("[DONE]\n\n")
    assert len(up.requests) == 1  # the refused request never reached the engine


async def test_a_stream_past_the_drain_timeout_is_cut_and_the_server_still_stops():
    async with serve_upstream([("stall", 30.0)]) as up, aiohttp.ClientSession() as session:
        config = make_config([{"id": "a", "pool": "p", "model": "m", "base_url": up.base_url}])
        app = create_app(config, runtime=wire(config, make_backends(config, {}), session))
        server, task, url = await _serving(app, delay_s=0.0, timeout_s=0.5)
        async with httpx.AsyncClient(timeout=10) as client:
            streaming = asyncio.create_task(_stream_text(client, url))
            while not up.requests:
                await asyncio.sleep(0.01)
            started = time.monotonic()
            server.handle_exit(signal.SIGTERM, None)
            await asyncio.wait_for(task, 10)
            stopped = time.monotonic() - started
            with pytest.raises(httpx.HTTPError):
                await streaming
    assert stopped < 5  # the 30 s stall was cut at the 0.5 s drain timeout


def test_second_signal_ends_the_delay():
    server = _Server(uvicorn.Config(None), Drain(), delay_s=60)
    server.handle_exit(signal.SIGTERM, None)
    assert server.drain.active and not server.should_exit
    server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit and not server.force_exit
    server.handle_exit(signal.SIGINT, None)
    assert server.force_exit


def test_sigint_shuts_down_without_a_delay():
    server = _Server(uvicorn.Config(None), Drain(), delay_s=60)
    server.handle_exit(signal.SIGINT, None)
    assert server.drain.active and server.should_exit and not server.force_exit


@pytest.mark.slow
def test_llmroute_serve_exits_0_after_sigterm(tmp_path):
    config = tmp_path / "router.yaml"
    config.write_text("""\
server: {drain_delay_s: 0.3, drain_timeout_s: 5}
pools: {general: {}}
backends: [{id: a, pool: general, engine: openai, model: m, base_url: "http://127.0.0.1:9"}]
routing: {default_pool: general}
gate: {kind: off}
""")
    with bind_socket("127.0.0.1", 0) as probe:
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmroute.cli.main", "serve", "--config", str(config),
         "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "draining" in err
