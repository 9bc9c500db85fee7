"""Real usage for reconciliation: from an answer's ``usage``, or counted off a stream, and
the request's cost.

A non-streamed answer's ``usage.total_tokens`` is taken as is. A stream is wrapped in
``Metered``, which passes the bytes through and counts its chunk events (about one token
each, as engines stream); when a chunk carries ``usage`` (the client asked for
``stream_options.include_usage``) its ``total_tokens`` wins. When the stream ends — done,
cut, failed, or closed because the client left — the ticket is settled with what was
streamed, once.

The cost is the sum over the request's attempts of what each used at its pool's price
(``dispatch.Attempt``, added up in the trace's summary: ``spent``), so an escalated
cascade, a verifier's judge or a stream handed off to another pool each pay their own
pool's price; it is settled against the caller's cost budgets with the tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from llmroute.observe.trace import Recorder
from llmroute.policy.limits import Ticket
from llmroute.types import ChatRequest


def spent(trace: Recorder | None) -> float | None:
    """The request's cost so far (currency units): what its settled attempts used on
    priced pools; None when it used none."""
    return None if trace is None else trace.summary.get("cost")


def answer_tokens(request: ChatRequest, body: Any) -> int:
    """Tokens a non-streamed answer used: ``usage.total_tokens``, else the prompt
    estimate plus ``usage.completion_tokens`` (0 when absent)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return request.prompt_tokens
    total, completion = usage.get("total_tokens"), usage.get("completion_tokens")
    if isinstance(total, int) and total >= 0:
        return total
    return request.prompt_tokens + (completion if isinstance(completion, int) else 0)


class Metered:
    """``stream`` (SSE bytes) passed through unchanged; ``ticket`` is settled with the
    streamed tokens and the cost ``trace`` adds up (module docstring) when it ends or is
    closed."""

    def __init__(self, stream: AsyncIterator[bytes], ticket: Ticket, prompt_tokens: int,
                 trace: Recorder | None = None):
        self._stream, self._ticket, self._trace = stream, ticket, trace
        self._events, self._prompt = 0, prompt_tokens
        self._usage: int | None = None

    def __aiter__(self) -> Metered:
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await anext(self._stream)
        except BaseException:
            await self._settle()
            raise
        self._events += data.count(b"data: {")
        if b'"total_tokens"' in data:
            self._usage = _stream_usage(data) or self._usage
        return data

    async def aclose(self) -> None:
        """Close the stream (and its upstream request), then settle."""
        try:
            await self._stream.aclose()  # type: ignore[attr-defined]
        finally:
            await self._settle()

    async def _settle(self) -> None:
        used = self._usage if self._usage is not None else self._prompt + self._events
        await self._ticket.settle(used, spent(self._trace))


def _stream_usage(data: bytes) -> int | None:
    """``usage.total_tokens`` of the chunk events in ``data`` carrying one, else None."""
    for line in data.split(b"\n"):
        if not line.startswith(b"data: {") or b'"total_tokens"' not in line:
            continue
        try:
            usage = orjson.loads(line[6:]).get("usage")
        except orjson.JSONDecodeError:
            continue
        total = usage.get("total_tokens") if isinstance(usage, dict) else None
        if isinstance(total, int):
            return total
    return None
