"""The output filter over a streamed answer: the relay's SSE bytes in, filtered SSE out.

It sits on the client's side of the relay (``flow/stages.OutputFilter`` wraps it), so the
relay is untouched and a stream without lists pays nothing. Each ``data:`` chunk's text
(``choices[0].delta.content``, or ``choices[0].text`` for completions) goes through one
``TextScan``: text is held back until no entry can still match it (at most the longest
entry's length), masks land on the original characters, and a chunk whose text is all held
back is dropped when it carries nothing else. The terminal chunk (a ``finish_reason``)
releases the rest; so do ``[DONE]``, an error event and the end of the stream, in a chunk
of their own. On a ``block`` match the text before the match goes out, then a chunk with
``finish_reason: "content_filter"`` and ``[DONE]``, as OpenAI ends a filtered stream, and
the upstream stream is closed. Chunk events without text (role, tool calls, usage) pass
through unchanged; tool-call arguments are not filtered on the way out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from llmroute.policy.scan import Scanned, TextScan
from llmroute.policy.wordlist import Hit

DONE = b"data: [DONE]\n\n"


async def filter_sse(stream: AsyncIterator[bytes], scan: TextScan, endpoint: str,
                     on_hits: Callable[[list[Hit]], None],
                     on_end: Callable[[str], None]) -> AsyncIterator[bytes]:
    """``stream``'s SSE events with their text filtered by ``scan`` (module docstring);
    ``on_hits`` gets each step's settled matches, ``on_end`` the text let out, once the
    stream ends or is closed (what the client got: masked, cut at a block). Closing it
    closes ``stream``."""
    out = _Rewriter(scan, endpoint, on_hits)
    try:
        async for data in stream:
            parts = [out.event(e) for e in data.split(b"\n\n") if e]
            if parts:
                yield b"".join(parts)
            if scan.done:
                return
        tail = out.release()
        if tail:
            yield tail
    finally:
        on_end("".join(out.sent))
        await stream.aclose()  # type: ignore[attr-defined]


class _Rewriter:
    """Rewrites one stream's events (``event`` takes one event without its blank line);
    ``sent``: the pieces of text let out so far."""

    __slots__ = ("_scan", "_chat", "_on_hits", "_last", "sent")

    def __init__(self, scan: TextScan, endpoint: str, on_hits: Callable[[list[Hit]], None]):
        self._scan, self._chat, self._on_hits = scan, endpoint == "chat", on_hits
        self._last: dict[str, Any] | None = None  # the last chunk seen (id, model, …)
        self.sent: list[str] = []

    def event(self, event: bytes) -> bytes:
        """One event (``data: …``) as SSE bytes to send: rewritten, passed or dropped."""
        if self._scan.done:
            return b""
        if not event.startswith(b"data: {"):
            return self.release() + event + b"\n\n"
        obj = orjson.loads(event[6:])
        choices = obj.get("choices")
        if not choices or not isinstance(choices[0], dict):
            return self.release() + event + b"\n\n"  # usage or error event
        self._last = obj
        choice = choices[0]
        holder = choice.get("delta") if self._chat else choice
        key = "content" if self._chat else "text"
        text = holder.get(key) if isinstance(holder, dict) else None
        final = choice.get("finish_reason") is not None
        if not (isinstance(text, str) and text) and not final:
            return event + b"\n\n"
        step = self._step(text if isinstance(text, str) else "", final)
        if step.blocked is not None:
            return self._chunk(step.text) + self._chunk(None, "content_filter") + DONE
        if isinstance(holder, dict) and (key in holder or step.text):
            holder[key] = step.text
        if not step.text and not final and _bare(choice, holder, key, obj):
            return b""
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def release(self) -> bytes:
        """What is still held back, as a chunk of its own (``b""`` when nothing is)."""
        if self._scan.done or not self._scan.pending:
            return b""
        step = self._step("", True)
        if step.blocked is not None:
            return self._chunk(step.text) + self._chunk(None, "content_filter")
        return self._chunk(step.text)

    def _step(self, text: str, final: bool) -> Scanned:
        step = self._scan.feed(text, final)
        if step.hits:
            self._on_hits(step.hits)
        if step.text:  # every step's text goes out (event, release)
            self.sent.append(step.text)
        return step

    def _chunk(self, text: str | None, finish: str | None = None) -> bytes:
        """A chunk like the last one seen, carrying ``text`` or ``finish`` (``b""`` for
        empty text)."""
        if finish is None and not text:
            return b""
        last = self._last or {}
        if self._chat:
            choice: dict[str, Any] = {"index": 0, "delta": {} if text is None else
                                      {"content": text}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        obj = {k: last[k] for k in ("id", "object", "created", "model") if k in last}
        return b"data: " + orjson.dumps({**obj, "choices": [choice]}) + b"\n\n"


def _bare(choice: dict[str, Any], holder: Any, key: str, obj: dict[str, Any]) -> bool:
    """Whether a chunk whose text is all held back carries nothing else worth sending."""
    extra = {k for k in choice if choice[k] is not None} - {"index", "delta", "text",
                                                             "finish_reason"}
    inner = {k for k in holder if k != key} if isinstance(holder, dict) and holder is not choice \
        else set()
    return not extra and not inner and "usage" not in obj and "llmroute" not in obj
