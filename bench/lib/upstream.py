"""A fast fixed-reply OpenAI chat upstream for overhead benchmarks (aiohttp.web).

``python bench/lib/upstream.py PORT CHUNKS DELAY_MS``: non-streamed requests get one short JSON
answer at once; streamed requests get CHUNKS content chunks DELAY_MS apart, then [DONE].
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys

from aiohttp import web

REPLY = "The quick brown fox jumps over the lazy dog."


def _answer() -> bytes:
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 10, "total_tokens": 22}}).encode()


def _chunk(i: int, last: bool = False) -> bytes:
    """Content chunk ``i``; the ``last`` one carries ``finish_reason: "stop"``, as engines
    end a stream (without it the router reads the stream as cut)."""
    obj = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1,
           "model": "bench", "choices": [{"index": 0, "delta": {"content": f" tok{i}"},
                                          "finish_reason": "stop" if last else None}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def make_app(chunks: int, delay_s: float, answer_delay_s: float = 0.0,
             slots: int | None = None) -> web.Application:
    """The upstream app: ``chunks`` streamed chunks ``delay_s`` apart; a non-streamed
    answer after ``answer_delay_s`` seconds. With ``slots``, at most that many requests are
    served at once and the others wait their turn in arrival order, as in an engine's
    queue (None: no limit)."""
    answer, parts = _answer(), [_chunk(i, i == chunks - 1) for i in range(chunks)]
    turn = asyncio.Semaphore(slots) if slots else contextlib.nullcontext()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        async with turn:
            return await _serve(request, body)

    async def _serve(request: web.Request, body: dict) -> web.StreamResponse:
        if not body.get("stream"):
            if answer_delay_s:
                await asyncio.sleep(answer_delay_s)
            return web.Response(body=answer, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in parts:
            if delay_s:
                await asyncio.sleep(delay_s)
            await resp.write(part)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    return app


if __name__ == "__main__":
    port, chunks, delay_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    web.run_app(make_app(chunks, delay_ms / 1000), host="127.0.0.1", port=port,
                access_log=None, print=None)
