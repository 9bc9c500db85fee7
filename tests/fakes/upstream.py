"""A scripted OpenAI-compatible engine on a real loopback port (aiohttp.web).

Each request takes the next step of ``script`` (the last step repeats). Steps:
``ok`` (answer normally: JSON, or SSE chunks with text ``reply``), ``("status", code,
retry_after)``, ``("cut", n)`` (stream n chunks then drop the connection), ``("stall", s)``
(stream one chunk, then wait s seconds), ``malformed`` (a non-JSON chunk after one good one),
``inband`` (an in-band error event after one good one), ``no_done`` (stream without [DONE]),
``("hang", s)`` (wait s seconds before answering at all).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

UPSTREAM = web.AppKey("upstream", "Upstream")


@dataclass
class Upstream:
    """A running fake engine: ``base_url``, the ``requests`` bodies it received, and how many
    streams were ``cancelled`` by the router closing the connection."""

    script: list[Any]
    reply: str = "Hello from the fake engine."
    requests: list[dict[str, Any]] = field(default_factory=list)
    cancelled: int = 0
    base_url: str = ""

    def next_step(self) -> Any:
        i = min(len(self.requests) - 1, len(self.script) - 1)
        return self.script[i]

    def words(self) -> list[str]:
        parts = self.reply.split(" ")
        return [p if i == 0 else " " + p for i, p in enumerate(parts)]


def _completion(up: Upstream, body: dict[str, Any]) -> dict[str, Any]:
    msg = {"role": "assistant", "content": up.reply}
    if body.get("tools"):
        msg = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": body["tools"][0]["function"]["name"], "arguments": "{}"}}]}
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"), "choices": [
                {"index": 0, "message": msg, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}


def _chunk(text: str | None, finish: str | None = None) -> bytes:
    delta = {} if text is None else {"content": text}
    obj = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
           "model": "fake", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _handle(request: web.Request) -> web.StreamResponse:
    up: Upstream = request.app[UPSTREAM]
    body = await request.json()
    up.requests.append(body)
    step = up.next_step()
    kind = step[0] if isinstance(step, tuple) else step
    if kind == "status":
        headers = {"Retry-After": str(step[2])} if len(step) > 2 and step[2] else {}
        err = {"error": {"message": f"scripted {step[1]}", "type": "server_error",
                         "param": None, "code": None}}
        return web.json_response(err, status=step[1], headers=headers)
    if kind == "hang":
        try:
            await asyncio.sleep(step[1])
        except asyncio.CancelledError:
            up.cancelled += 1
            raise
    if not body.get("stream"):
        return web.json_response(_completion(up, body))
    return await _stream(request, up, step)


async def _stream(request: web.Request, up: Upstream, step: Any) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    kind = step[0] if isinstance(step, tuple) else step
    try:
        await _play(resp, up, kind, step)
    except (ConnectionResetError, asyncio.CancelledError):
        up.cancelled += 1
        raise
    return resp


async def _play(resp: web.StreamResponse, up: Upstream, kind: str, step: Any) -> None:
    words = up.words()
    if kind == "cut":
        for w in words[: step[1]]:
            await resp.write(_chunk(w))
        resp.force_close()
        if resp.task is not None and resp._req is not None:
            resp._req.transport.close()
        return
    await resp.write(_chunk(words[0]))
    if kind == "stall":
        await asyncio.sleep(step[1])
    if kind == "malformed":
        await resp.write(b"data: {not json\n\n")
        return
    if kind == "inband":
        await resp.write(b'data: {"error": {"message": "engine exploded"}}\n\n')
        return
    for w in words[1:]:
        await asyncio.sleep(0.005)
        await resp.write(_chunk(w))
    await resp.write(_chunk(None, "stop"))
    if kind != "no_done":
        await resp.write(b"data: [DONE]\n\n")


@contextlib.asynccontextmanager
async def serve_upstream(script: list[Any], reply: str = "Hello from the fake engine."
                         ) -> AsyncIterator[Upstream]:
    """Serve a scripted upstream on 127.0.0.1 (a free port) for the duration of the block."""
    up = Upstream(list(script), reply)
    app = web.Application()
    app[UPSTREAM] = up
    app.router.add_post("/v1/chat/completions", _handle)
    app.router.add_post("/v1/completions", _handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    up.base_url = f"http://127.0.0.1:{port}"
    try:
        yield up
    finally:
        await runner.cleanup()
