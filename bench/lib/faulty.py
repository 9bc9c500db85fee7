"""A scripted OpenAI chat engine that misbehaves at random (aiohttp.web), for bench/faults.py.

Every streamed request draws one fault (seeded ``random.Random``): ``ok`` (the answer in
word chunks ``DELAY_S`` apart, a ``finish_reason`` chunk, ``[DONE]``), ``cut`` (the same
bytes cut at a random byte offset, then the connection is dropped), ``stall`` (one chunk,
then silence for ``hold_s``), ``500`` (an error answer before any byte), ``end`` (every
content chunk, then a clean end of the body: no ``finish_reason``, no ``[DONE]``) or
``slow`` (one chunk, then the rest at ``SLOW_TPS`` words a second: every word inside the
stall bound, the answer far too slow). A request whose
last message is an assistant prefix of ``REPLY`` (a continuation) is answered with the rest
of ``REPLY``; any other prefix gets all of it (a restart, which the bench counts as
duplicated text). ``log`` keeps ``(marker, fault, at, fault_at)`` per request, ``marker``
being the first message's content, ``at`` when the request came and ``fault_at`` when its
fault struck (the cut, the start of the silence, the 500, the early end; None for ``ok``), in
``time.monotonic()`` seconds (one clock for every process of the machine).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from aiohttp import web

REPLY = ("The quick brown fox jumps over the lazy dog while the five boxing wizards jump "
         "quickly and a sphinx of black quartz judges my vow.")
DELAY_S = 0.005
SLOW_TPS = 3.0
FAULTS = ("ok", "cut", "stall", "500", "end", "slow")


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    obj = {"id": "chatcmpl-faulty", "object": "chat.completion.chunk", "created": 1,
           "model": "faulty", "choices": [{"index": 0, "delta": delta,
                                            "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def stream_bytes(text: str) -> list[bytes]:
    """The SSE events answering ``text``: one per word, a finish chunk, ``[DONE]``."""
    words = text.split(" ")
    parts = [w if i == 0 else " " + w for i, w in enumerate(words)]
    return ([_chunk({"role": "assistant", "content": p}) for p in parts if p]
            + [_chunk({}, "stop"), b"data: [DONE]\n\n"])


class Faulty:
    """One engine: ``weights`` per fault in ``FAULTS`` order, ``hold_s`` a stall's length."""

    def __init__(self, rng: random.Random, weights: tuple[float, ...], hold_s: float):
        self.rng, self.weights, self.hold_s = rng, weights, hold_s
        self.log: list[list[Any]] = []  # [marker, fault, at, fault_at]

    def app(self) -> web.Application:
        """The aiohttp app serving ``POST /v1/chat/completions``."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """Answer one request with the fault it draws."""
        body = await request.json()
        messages = body.get("messages") or [{}]
        last = messages[-1]
        prefix = last.get("content") or "" if last.get("role") == "assistant" else ""
        rest = REPLY[len(prefix):] if REPLY.startswith(prefix) else REPLY
        fault = self.rng.choices(FAULTS, self.weights)[0] if body.get("stream") else "ok"
        entry: list[Any] = [str(messages[0].get("content")), fault, time.monotonic(), None]
        self.log.append(entry)  # fault_at (entry[3]) is filled in as the fault strikes
        if fault == "500":
            entry[3] = time.monotonic()
            return web.json_response({"error": {"message": "scripted 500", "type":
                                                "server_error", "param": None,
                                                "code": None}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await self._play(resp, request, fault, stream_bytes(rest), entry)
        return resp

    async def _play(self, resp: web.StreamResponse, request: web.Request, fault: str,
                    events: list[bytes], entry: list[Any]) -> None:
        """Send ``events`` with ``fault``, noting in ``entry[3]`` when it struck (before a
        stall's silence: the router closes the request, which cancels this handler)."""
        cut_at = self.rng.randrange(sum(map(len, events))) if fault == "cut" else -1
        sent = 0
        if fault == "end":
            events = events[:-2]
        for i, event in enumerate(events):
            if fault == "stall" and i == 1:
                entry[3] = time.monotonic()
                await asyncio.sleep(self.hold_s)
                return
            if 0 <= cut_at < sent + len(event):
                await resp.write(event[:cut_at - sent])
                if request.transport is not None:
                    request.transport.close()
                entry[3] = time.monotonic()
                return
            try:
                await resp.write(event)
            except ConnectionResetError:  # a crawl the router handed off: it hung up
                return
            sent += len(event)
            if fault == "slow" and i == 0:
                entry[3] = time.monotonic()  # the crawl begins after the first word
            await asyncio.sleep(1 / SLOW_TPS if fault == "slow" else DELAY_S)
        if fault == "end":
            entry[3] = time.monotonic()
