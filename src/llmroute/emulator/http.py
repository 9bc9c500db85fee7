"""The emulated engine's HTTP API (aiohttp.web), shaped like vLLM's OpenAI server.

``POST /v1/chat/completions`` and ``POST /v1/completions`` (streamed as SSE or not;
``logprobs``/``top_logprobs``; ``stream_options.include_usage``), ``GET /metrics``,
``GET /dcgm/metrics`` (the GPU as a DCGM exporter shows it: ``gpu.py``), ``GET /health``
and ``GET /v1/models``. Bodies are read by the emulator's own models (``emulator.request``,
not the router's). Output is exactly ``max_tokens`` tokens (``max_completion_tokens`` for
chat; 256 when neither is given), ``finish_reason: "length"`` — fewer for a degraded
answer cut short (``cues.py``). Errors are OpenAI-shaped ``{"error": {…}}`` bodies.

The engine's link (``cues.Link``; none by default) delays every request by one round trip
plus its body's bytes before the handler runs, and every response body and streamed chunk
by its bytes over the bandwidth after the headers went out (the metrics pages too, so a
poller can time the link).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from llmroute.emulator.engine import EmulatedEngine, Handle
from llmroute.emulator.gpu import render_dcgm
from llmroute.emulator.metrics import CONTENT_TYPE
from llmroute.emulator.request import EngineRequest, Endpoint, parse_request
from llmroute.emulator.scheduler import Rejection
from llmroute.emulator.text import TokenSource, content_of, strip_top
from llmroute.errors import InvalidRequest

DEFAULT_MAX_TOKENS = 256
ENGINE_KEY = web.AppKey("engine", EmulatedEngine)


def create_engine_app(engine: EmulatedEngine) -> web.Application:
    """The aiohttp application serving ``engine`` (its step loop is run by the caller)."""
    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[_link])
    app[ENGINE_KEY] = engine
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/dcgm/metrics", _dcgm)
    app.router.add_get("/health", _health)
    app.router.add_get("/v1/models", _models)
    return app


def error_response(status: int, message: str, code: str, param: str | None = None,
                   ) -> web.Response:
    """An OpenAI-shaped error body with HTTP ``status``."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, dumps=lambda o: orjson.dumps(o).decode())


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _link(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One round trip plus the request's bytes over the link before the handler runs."""
    engine = request.app[ENGINE_KEY]
    link = engine.spec.cues.link_at(engine.model_time())
    if link.rtt_s or link.bytes_per_s:
        size = len(await request.read()) + 256  # the body plus a request head
        await asyncio.sleep(link.delay_s(size, round_trips=1) * engine.spec.time_scale)
    return await handler(request)


async def _after_head(engine: EmulatedEngine, nbytes: int) -> None:
    """Wait while ``nbytes`` cross the engine's link (wall seconds)."""
    link = engine.spec.cues.link_at(engine.model_time())
    if link.bytes_per_s:
        await asyncio.sleep(link.delay_s(nbytes) * engine.spec.time_scale)


async def _page(request: web.Request, body: bytes) -> web.StreamResponse:
    """A metrics page: the headers first, then the body once it crossed the link."""
    resp = web.StreamResponse(headers={"content-type": CONTENT_TYPE})
    await resp.prepare(request)
    await _after_head(request.app[ENGINE_KEY], len(body))
    await resp.write(body)
    await resp.write_eof()
    return resp


async def _metrics(request: web.Request) -> web.StreamResponse:
    return await _page(request, request.app[ENGINE_KEY].metrics.render())


async def _dcgm(request: web.Request) -> web.StreamResponse:
    return await _page(request, render_dcgm(request.app[ENGINE_KEY].dcgm))


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200 if request.app[ENGINE_KEY].alive() else 503)


async def _models(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    card = {"id": engine.spec.model_name, "object": "model", "created": int(time.time()),
            "owned_by": "llmroute-emulator",
            "max_model_len": engine.scheduler.config.max_model_len}
    return web.json_response({"object": "list", "data": [card]})


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "chat")


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "completions")


async def _serve(request: web.Request, endpoint: Endpoint) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    rid = request.headers.get("x-request-id") or uuid.uuid4().hex
    try:
        req = parse_request(endpoint, await request.read(), rid)
    except InvalidRequest as err:
        return error_response(400, err.message, err.code or "invalid_request", err.param)
    if req.model != engine.spec.model_name:
        return error_response(404, f"The model `{req.model}` does not exist.",
                              "model_not_found", "model")
    cues, now = engine.spec.cues, engine.model_time()
    rng = random.Random(f"{engine.spec.seed}:{rid}:cut")
    handle = engine.submit(req.prompt_tokens,
                           cues.max_tokens(now, req.max_tokens or DEFAULT_MAX_TOKENS, rng),
                           engine.prompt_hashes(req.text))
    if isinstance(handle, Rejection):
        return error_response(handle.status, handle.message, handle.code)
    answer = _Answer(engine, req, handle, cues.degraded(now))
    try:
        if req.stream:
            return await answer.stream(request)
        return await answer.whole()
    finally:
        engine.abort(handle)


class _Answer:
    """Builds one request's answer (whole or streamed) from its Handle's progress."""

    def __init__(self, engine: EmulatedEngine, req: EngineRequest, handle: Handle,
                 degraded: bool = False):
        self.engine = engine
        self.req = req
        self.handle = handle
        self.chat = req.endpoint == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:16]
        self.created = int(time.time())
        self.tokens = TokenSource(engine.spec.seed, req.request_id, degraded)
        self.top_n = req.top_n

    async def whole(self) -> web.Response:
        """Wait for the last token; the whole answer as one JSON object."""
        async for _ in self.handle.updates():
            pass
        toks = self.tokens.next_tokens(self.handle.generated, self.top_n)
        choice = self._choice(toks, final=True, whole=True)
        body = {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.engine.spec.model_name,
                "choices": [choice], "usage": self._usage()}
        data = orjson.dumps(body)
        await _after_head(self.engine, len(data))
        return web.Response(body=data, content_type="application/json")

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """SSE: one chunk per update (first token, every ``stream_interval`` tokens, last),
        then a usage chunk if asked, then ``[DONE]``."""
        resp = web.StreamResponse(headers={"content-type": "text/event-stream",
                                           "cache-control": "no-cache"})
        await resp.prepare(request)
        try:
            await self._stream_body(resp)
        except ConnectionResetError:
            return resp  # the client went away; the caller aborts the request
        return resp

    async def _stream_body(self, resp: web.StreamResponse) -> None:
        sent = 0
        async for n in self.handle.updates():
            toks = self.tokens.next_tokens(n, self.top_n)
            choice = self._choice(toks, final=self.handle.finished, first=sent == 0)
            sent += n
            await self._send(resp, [choice])
        if self.req.include_usage:
            await self._send(resp, [], usage=self._usage())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()

    async def _send(self, resp: web.StreamResponse, choices: list[dict[str, Any]],
                    usage: dict[str, int] | None = None) -> None:
        chunk: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created, "model": self.engine.spec.model_name, "choices": choices}
        if usage is not None:
            chunk["usage"] = usage
        data = b"data: " + orjson.dumps(chunk) + b"\n\n"
        await _after_head(self.engine, len(data))
        await resp.write(data)

    def _choice(self, toks: list[dict[str, Any]], *, final: bool, whole: bool = False,
                first: bool = False) -> dict[str, Any]:
        text = content_of(toks)
        choice: dict[str, Any] = {"index": 0, "logprobs": self._logprobs(toks),
                                  "finish_reason": "length" if final else None}
        if not self.chat:
            choice["text"] = text
        elif whole:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["delta"] = {"role": "assistant", "content": text} if first else {
                "content": text}
        return choice

    def _logprobs(self, toks: list[dict[str, Any]]) -> dict[str, Any] | None:
        if self.top_n is None:
            return None
        if self.chat:
            return {"content": toks if self.top_n else strip_top(toks)}
        return _legacy_logprobs(toks)

    def _usage(self) -> dict[str, int]:
        p, c = self.handle.prompt_tokens, self.handle.generated
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _legacy_logprobs(toks: list[dict[str, Any]]) -> dict[str, Any]:
    """Legacy completions ``logprobs``: tokens, token_logprobs, top_logprobs, text_offset."""
    offsets, at = [], 0
    for t in toks:
        offsets.append(at)
        at += len(t["token"])
    return {"tokens": [t["token"] for t in toks],
            "token_logprobs": [t["logprob"] for t in toks],
            "top_logprobs": [{a["token"]: a["logprob"] for a in t["top_logprobs"]} for t in toks],
            "text_offset": offsets}
