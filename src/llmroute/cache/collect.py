"""Which answers are stored, and a stream's answer assembled as it passes.

Only a complete, successful answer is stored: one choice, ``finish_reason: "stop"`` (not
``length``: cut short; not ``content_filter``: blocked — an answer the output filter only
masked keeps ``stop`` and is stored as masked, the text the client got), text content, no
tool call, no refusal, no error. ``unstorable(body)`` names why not, or None.

``Collected(stream, on_answer)`` passes an SSE stream through unchanged, reading its chunk
events (``backends/sse.SSEDecoder``) into one non-streamed answer: the content deltas
joined, the finish reason, the usage chunk when there is one. When the stream ends cleanly
(``data: [DONE]`` seen, then exhausted) and the answer is storable, ``on_answer(body)`` is
called once; a stream cut, failed or closed early by the client stores nothing. At most
``max_bytes`` of content are gathered (past that nothing is stored).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from llmroute.backends.sse import SSEDecoder
from llmroute.errors import LLMRouteError


def unstorable(body: Any) -> str | None:
    """Why ``body`` (a non-streamed answer) may not be stored, or None when it may."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return "choices"
    if "error" in body:
        return "error"
    choice = choices[0]
    if choice.get("finish_reason") != "stop":
        return "unfinished"
    message = choice.get("message")
    if isinstance(message, dict):
        if message.get("tool_calls") or message.get("function_call") or message.get("refusal"):
            return "tools"
        text = message.get("content")
    else:
        text = choice.get("text")
    return None if isinstance(text, str) and text else "empty"


class Collected:
    """``stream`` passed through; ``on_answer`` gets its answer when it ends cleanly
    (module docstring)."""

    def __init__(self, stream: AsyncIterator[bytes], on_answer: Callable[[dict[str, Any]], None],
                 max_bytes: int):
        self._stream, self._on_answer, self._max = stream, on_answer, max_bytes
        self._decoder = SSEDecoder()
        self._parts: list[str] = []
        self._size = 0
        self._head: dict[str, Any] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._done = self._spoiled = False

    def __aiter__(self) -> Collected:
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await anext(self._stream)
        except StopAsyncIteration:
            self._end()
            raise
        if not self._spoiled:
            self._read(data)
        return data

    async def aclose(self) -> None:
        """Close the stream (and its upstream request); nothing is stored."""
        self._spoiled = True
        await self._stream.aclose()  # type: ignore[attr-defined]

    def _read(self, data: bytes) -> None:
        try:
            events = self._decoder.feed(data)
        except LLMRouteError:
            self._spoiled = True
            return
        for event in events:
            if event.data == "[DONE]":
                self._done = True
            elif event.data:
                self._chunk(event.data)

    def _chunk(self, data: str) -> None:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            self._spoiled = True
            return
        if not isinstance(chunk, dict) or "error" in chunk:
            self._spoiled = True
            return
        if not self._head:
            self._head = {k: chunk.get(k) for k in ("id", "object", "created", "model")}
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            self._choice(choice)

    def _choice(self, choice: Any) -> None:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            self._spoiled = True
            return
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(delta, dict) and (delta.get("tool_calls") or delta.get("refusal")):
            self._spoiled = True
        if isinstance(text, str) and text:
            self._size += len(text)
            self._spoiled = self._spoiled or self._size > self._max
            self._parts.append(text)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]

    def _end(self) -> None:
        if self._spoiled or not self._done:
            return
        self._spoiled = True  # once
        body = self.answer()
        if unstorable(body) is None:
            self._on_answer(body)

    def answer(self) -> dict[str, Any]:
        """The answer read so far, non-streamed (chat or completions shape)."""
        text = "".join(self._parts)
        chat = self._head.get("object") != "text_completion"
        choice: dict[str, Any] = {"index": 0, "finish_reason": self._finish}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        body = {"id": self._head.get("id"), "created": self._head.get("created"),
                "model": self._head.get("model"), "choices": [choice],
                "object": "chat.completion" if chat else "text_completion"}
        if self._usage is not None:
            body["usage"] = self._usage
        return body
