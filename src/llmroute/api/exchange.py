"""The two OpenAI POST endpoints as plain ASGI apps: read, validate, route, answer.

They speak ASGI directly instead of going through Starlette's request/response wrappers:
a watcher task, started 50 ms into a request (``WATCH_AFTER_S``; quicker answers need
none), listens for the client's ``http.disconnect`` and cancels the request's task (which
closes the upstream request), and answers are sent as two ASGI messages.
``bench/overhead.py`` measured the wrappers (an anyio task group per stream, a second task
and an ``asyncio.wait`` per request, a ``Response`` object) as a large share of the
router's own CPU per request.

Errors before the answer starts are sent in OpenAI shape by the same handlers Starlette
uses (``api/errors.py``); an error after a stream has started is logged and re-raised, so
the server closes the connection (the relay already ends every stream with ``[DONE]`` or an
OpenAI error event, so this is a bug path).

A ``Surface`` (``api/surface.py``: Anthropic Messages, OpenAI Responses) is served by the
same exchange: the surface turns its body into the one internal ``ChatRequest``, the flow
runs unchanged (``pipeline.route``, the only call into it), and the surface translates the
``Routed`` answer and every refusal into its own shapes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send

from llmroute.api.body import read_json
from llmroute.api.errors import keep_request_id, on_llmroute_error, on_unexpected
from llmroute.api.surface import Surface
from llmroute.errors import LLMRouteError
from llmroute.flow import pipeline
from llmroute.flow.call import Call, Flow
from llmroute.observe.trace import Recorder, failure
from llmroute.runtime import Runtime
from llmroute.types import ChatRequest

Parser = Callable[[Any, str], ChatRequest]
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
_JSON_HEADERS = [(b"content-type", b"application/json")]


class Exchange:
    """ASGI app for ``POST /v1/chat/completions``, ``/v1/completions`` or
    ``/v1/embeddings``; ``parse`` turns the JSON body into a ChatRequest (raises
    InvalidRequest), ``flow`` serves it (``pipeline.route``; ``embeddings.route_embeddings``).
    Answers 200 with JSON or SSE, an OpenAI-shaped 4xx/5xx, or nothing when the client
    disconnects first. ``api`` labels the request's trace and metrics (``chat``,
    ``completions``, ``embeddings``; a surface's own name); with a ``surface`` it parses,
    answers and refuses in that surface's shapes (``parse`` is then unused)."""

    def __init__(self, parse: Parser | None, flow: Flow = pipeline.route, api: str = "chat",
                 surface: Surface | None = None):
        self._parse = parse
        self._flow = flow
        self._surface = surface
        self.api = surface.api if surface is not None else api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reply = _Reply(send)
        try:
            await self._serve(scope, receive, reply)
        except ClientDisconnect:
            return  # gone while sending its body: nobody to answer
        except Exception as exc:
            if reply.started:
                raise
            await self.refuse(scope, receive, send, exc)

    async def refuse(self, scope: Scope, receive: Receive, send: Send, exc: Exception) -> None:
        """Answer ``exc`` (before any byte of an answer went out): an LLMRouteError as its
        4xx/5xx, anything else as a logged 500, in the surface's shape (OpenAI's without
        one)."""
        request = Request(scope, receive)
        handler = on_llmroute_error if isinstance(exc, LLMRouteError) else on_unexpected
        response = await handler(request, exc)
        if self._surface is not None:
            response = self._surface.refusal(response)
        await response(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, reply: _Reply) -> None:
        rt: Runtime = scope["app"].state.runtime
        headers = _first_values(scope)
        rid = keep_request_id(scope, _text(headers, b"x-request-id"))
        http_headers = Headers(scope=scope)
        trace = rt.observer.recorder(rid, http_headers)
        trace.summary["api"] = self.api
        try:
            await self._answer(rt, receive, reply, headers, http_headers, trace)
        except BaseException as exc:
            trace.fail(*failure(exc))
            raise
        finally:
            rt.observer.finish(trace)

    async def _answer(self, rt: Runtime, receive: Receive, reply: _Reply,
                      headers: dict[bytes, bytes], http_headers: Headers, trace: Recorder
                      ) -> None:
        caller = await pipeline.authenticate(rt, http_headers) if rt.policy else None
        body = await read_json(receive, _text(headers, b"content-type"),
                               _text(headers, b"content-length"),
                               rt.config.server.max_body_bytes)
        surface, context = self._surface, None
        if surface is None:
            assert self._parse is not None
            chat = self._parse(body, trace.request_id)
        else:
            chat, context = await surface.request(rt, body, trace.request_id, caller)
        trace.received(chat.stream, chat.prompt_tokens, chat.text, chat.max_tokens)
        with DisconnectWatch(receive) as watch:
            try:
                routed = await self._flow(Call(rt, chat, caller, http_headers, trace))
                if surface is not None:
                    routed = await surface.answer(rt, chat, context, routed, caller)
                if routed.stream is None:
                    await reply.json(routed.body, routed.headers)
                else:
                    await reply.stream(routed.stream, routed.headers)
            except asyncio.CancelledError:
                if not watch.gone:
                    raise
                trace.fail(499, "client disconnected")


def _first_values(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by name; of a repeated name the first value, as Starlette's
    ``Headers.get`` reads it (names arrive lower-cased from the server)."""
    raw = scope["headers"]
    if not isinstance(raw, list):
        raw = scope["headers"] = list(raw)
    return dict(reversed(raw))


def _text(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")


WATCH_AFTER_S = 0.05
"""Seconds into a request before its disconnect watcher starts: a request answered sooner
(a short non-streamed answer) costs no watcher task at all, and a client that leaves is
noticed at most this much later — nothing next to a generation's seconds."""


class DisconnectWatch:
    """``with DisconnectWatch(receive) as watch``: while the block runs, a client
    disconnect cancels the current task and ``watch.gone`` becomes True (the block then
    swallows the cancellation). The watcher task starts ``WATCH_AFTER_S`` into the block. A
    plain class and a synchronous context manager (entering and leaving await nothing): it
    is entered once per request, and a quick answer then costs one timer handle."""

    __slots__ = ("_receive", "gone", "_task", "_watcher", "_later")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.gone = False
        self._task: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._later: asyncio.TimerHandle | None = None

    def __enter__(self) -> DisconnectWatch:
        loop = asyncio.get_running_loop()  # once: on Python 3.11 each lookup is a getpid()
        self._task = asyncio.current_task(loop)
        self._later = loop.call_later(WATCH_AFTER_S, self._start)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._later is not None and self._task is not None
        self._later.cancel()
        if self._watcher is not None:
            self._watcher.cancel()
        if self.gone:
            self._task.uncancel()

    def _start(self) -> None:
        self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        assert self._task is not None
        self.gone = True
        self._task.cancel()


class _Reply:
    """The answer's two ways out through ASGI ``send``; ``started`` turns True as the
    status line goes out (after that an error can no longer become an error answer)."""

    __slots__ = ("_send", "started")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def json(self, body: Any, headers: dict[str, str]) -> None:
        """Send ``body`` as JSON with ``headers``."""
        data = orjson.dumps(body)
        raw = [*_JSON_HEADERS, (b"content-length", str(len(data)).encode()), *_encode(headers)]
        self.started = True
        await self._send({"type": "http.response.start", "status": 200, "headers": raw})
        await self._send({"type": "http.response.body", "body": data})

    async def stream(self, stream: AsyncIterator[bytes], headers: dict[str, str]) -> None:
        """Send SSE bytes as they come; the stream is closed however this ends."""
        send = self._send
        raw = [*_SSE_HEADERS, *_encode(headers)]
        self.started = True
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw})
            async for chunk in stream:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        await send({"type": "http.response.body", "body": b""})


def _encode(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
