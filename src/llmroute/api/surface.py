"""The contract of a client surface translated at the edge (``/v1/messages``,
``/v1/responses``): one module per surface turns its body into the one internal request
(``ChatRequest``, a Chat Completions body) and the ``Routed`` answer — a chat completion, or
its SSE chunks — back into the surface's own shapes. Nothing below ``api/`` sees a second
request shape: every layer (policies, gate, strategies, anchor, failover, the fuse's
handoff, traces, metrics) serves the translated request as it serves ``/v1/chat/completions``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import orjson
from starlette.responses import Response

from llmroute.backends.sse import DONE
from llmroute.policy.auth import Caller
from llmroute.runtime import Runtime
from llmroute.types import ChatRequest, Routed


class Surface(Protocol):
    """One client API translated onto the chat request; ``api`` names it in traces and the
    ``llmroute_requests_total{api}`` label."""

    api: str

    async def request(self, rt: Runtime, body: Any, request_id: str, caller: Caller | None
                      ) -> tuple[ChatRequest, Any]:
        """The chat request for the surface's JSON ``body``, and what ``answer`` needs of
        the body besides (the surface's own). Raises InvalidRequest (400) naming the field,
        NotFound (404) for state it names that ``caller`` cannot see."""
        ...

    async def answer(self, rt: Runtime, request: ChatRequest, context: Any, routed: Routed,
                     caller: Caller | None) -> Routed:
        """``routed`` (a chat completion or its SSE chunks) in the surface's shape
        (``context``: what ``request`` returned beside the chat request); a stream is
        translated chunk by chunk as it flows, never gathered first."""
        ...

    def refusal(self, response: Response) -> Response:
        """The OpenAI-shaped error ``response`` (status, headers, ``{"error": {...}}``) in
        the surface's error shape."""
        ...


def error_fields(response: Response) -> dict[str, Any]:
    """The ``error`` object of an OpenAI-shaped error ``response`` (empty when absent)."""
    body = orjson.loads(bytes(response.body))
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def reshaped(response: Response, status: int, body: Any) -> Response:
    """``response`` with ``status`` and the JSON ``body``; its headers (``x-request-id``,
    ``retry-after``, ``x-ratelimit-*``) kept."""
    headers = {k: v for k, v in response.headers.items()
               if k not in ("content-length", "content-type")}
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


class Translation(Protocol):
    """A stream translator's three hooks (see ``translated``)."""

    def chunk(self, obj: dict[str, Any]) -> bytes:
        """The surface's events for one chat chunk (b"" when there are none)."""
        ...

    def failed(self, error: dict[str, Any]) -> bytes:
        """The surface's events for an in-stream error (an OpenAI ``error`` object)."""
        ...

    async def done(self) -> bytes:
        """The surface's closing events (the chat stream's ``[DONE]`` came)."""
        ...


class ChatChunks:
    """The reading every stream translation shares: each chat chunk's ``usage`` (kept in
    ``usage``), and per choice its reasoning (``reasoning_content``, or vLLM's newer
    ``reasoning``), text and tool-call deltas, handed to the hooks in that order, and its
    ``finish_reason`` (``_finished``); ``chunks`` counts the choices read (about one token
    each, the output count when the engine reports no usage)."""

    def __init__(self) -> None:
        self.usage: Any = None
        self.chunks = 0

    def chunk(self, obj: dict[str, Any]) -> bytes:
        """The surface's events for one chat chunk (``_start``'s first)."""
        out = self._start()
        if obj.get("usage") is not None:
            self.usage = obj["usage"]
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                out += self._reasoning(reasoning)
            if delta.get("content"):
                out += self._text(delta["content"])
            for call in delta.get("tool_calls") or ():
                out += self._call(call)
            self.chunks += 1
            if choice.get("finish_reason"):
                self._finished(choice)
        return out

    def _start(self) -> bytes:
        """The events that open the answer (once; b"" after)."""
        raise NotImplementedError

    def _reasoning(self, text: str) -> bytes:
        """Events for a reasoning delta (b"": the surface shows none)."""
        return b""

    def _text(self, text: str) -> bytes:
        """Events for a text delta."""
        raise NotImplementedError

    def _call(self, call: dict[str, Any]) -> bytes:
        """Events for a tool-call delta (indexed, ``fuse/shape.ToolIndex``)."""
        raise NotImplementedError

    def _finished(self, choice: dict[str, Any]) -> None:
        """The choice's ``finish_reason`` came."""


async def translated(stream: AsyncIterator[bytes], translation: Translation
                     ) -> AsyncIterator[bytes]:
    """``stream`` (the chat SSE the flow answers: chunks, then ``[DONE]`` or an error event)
    translated event by event as each piece arrives: what one piece of the chat stream
    completes goes out at once, nothing is held for the answer's end. Closing the result
    closes ``stream`` (and with it the upstream request).

    The flow's stream is framed by ``backends.sse.encode_json`` (one ``data:`` line per
    event, events ending in a blank line), so its events are read by splitting on the blank
    line — a piece that ends inside an event is held until the rest comes — instead of
    through the general ``SSEDecoder`` (engines' streams), which cost 40 % of the
    translation's CPU here."""
    held = b""
    try:
        async for data in stream:
            *events, held = (held + data if held else data).split(b"\n\n")
            out = b""
            for event in events:
                if not event.startswith(b"data: "):
                    continue  # a comment (keep-alive)
                if event == DONE_EVENT:
                    out += await translation.done()
                    continue
                obj = orjson.loads(event[6:])
                error = obj.get("error")
                out += translation.failed(error) if isinstance(error, dict) \
                    else translation.chunk(obj)
            if out:
                yield out
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


DONE_EVENT = DONE.rstrip(b"\n")
"""The chat stream's ``data: [DONE]`` event, without its blank line."""
