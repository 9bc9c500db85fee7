"""Client-facing error bodies never carry an engine's host, port or raw answer bytes; the
request's trace (and the log) keeps them as ``detail``."""

from __future__ import annotations

import contextlib
import socket

import pytest
from aiohttp import web

from tests.fakes.router import make_config, open_router

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
LEAK = "internal-gw-7.corp.example:31337"


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def html_engine(status: int, body: str, content_type: str = "text/html"):
    """An engine behind a proxy that answers ``status`` with a non-OpenAI page."""
    async def handle(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type=content_type)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()


async def _ask(base_url: str, stream: bool = False):
    config = make_config([{"id": "a", "pool": "p", "model": "m", "base_url": base_url}],
                         retry={"max_attempts": 1})
    async with open_router(config) as (rt, client):
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
        trace = rt.observer.ring.get(resp.headers["x-request-id"])
    return resp, trace


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_refused_connection_names_no_host_or_port(stream):
    port = _dead_port()
    resp, trace = await _ask(f"http://127.0.0.1:{port}", stream)
    assert resp.status_code == 503
    message = resp.json()["error"]["message"]
    assert "the engine refused the connection" in message
    assert not message.startswith("a:") and "a: " not in message  # the backend id stays in logs
    assert str(port) not in resp.text and "127.0.0.1" not in resp.text
    attempt = next(s for s in trace.steps if s.name == "attempt")
    assert str(port) in attempt.fields["detail"]  # the operator still sees where


async def test_an_unresolvable_host_is_not_named():
    resp, trace = await _ask("http://no-such-engine.invalid:8000")
    assert resp.status_code == 503
    assert "the engine's host name does not resolve" in resp.json()["error"]["message"]
    assert "no-such-engine" not in resp.text and "8000" not in resp.text


async def test_a_proxy_error_page_is_not_relayed():
    page = f"<html><body>502 Bad Gateway<hr>nginx at {LEAK}</body></html>"
    async with html_engine(502, page) as url:
        resp, trace = await _ask(url)
    assert resp.status_code == 503
    assert "the engine answered 502: an error body that is not OpenAI-shaped" in resp.text
    assert LEAK not in resp.text and "<html>" not in resp.text
    attempt = next(s for s in trace.steps if s.name == "attempt")
    assert LEAK in attempt.fields["detail"]
