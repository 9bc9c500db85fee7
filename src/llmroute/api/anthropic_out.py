"""Chat answers in Anthropic's shapes: a chat completion as a ``message``, the chat SSE
stream as Anthropic's typed events, an error in Anthropic's error shape.

The stream follows Anthropic's event order (the ``anthropic`` SDK's ``accumulate_event``
reads it): ``message_start`` (usage with the prompt's ``input_tokens``), a ``ping``, per
block ``content_block_start`` / ``content_block_delta`` (``text_delta``,
``input_json_delta`` for a tool call's arguments, ``thinking_delta`` for an engine's
``reasoning_content``) / ``content_block_stop``, then ``message_delta`` (``stop_reason``,
``stop_sequence``, usage: ``output_tokens`` and the final ``input_tokens``) and
``message_stop``; an error inside the stream is an ``error`` event. Translated chunk by
chunk as the chat stream flows (LiteLLM's ``AnthropicStreamWrapper``, vLLM's
``serving.py`` stream converter do the same): a fuse handoff, already invisible in the
chat stream (``fuse/seam.py``), stays invisible here.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from llmroute.api.surface import ChatChunks
from llmroute.types import ChatRequest

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}
"""Chat ``finish_reason`` → Anthropic ``stop_reason`` (others: ``end_turn``)."""

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               415: "invalid_request_error", 429: "rate_limit_error", 504: "timeout_error",
               529: "overloaded_error"}
"""Anthropic's error type per HTTP status (docs: "Errors"); other 4xx are
``invalid_request_error``, other 5xx ``api_error``."""


def message_id(request: ChatRequest) -> str:
    """The Anthropic message id of ``request``'s answer (``msg_`` + the request id)."""
    return "msg_" + request.request_id


def stop_of(choice: dict[str, Any], stops: list[str] | None) -> tuple[str, str | None]:
    """``(stop_reason, stop_sequence)`` of a chat choice: ``stop_sequence`` when the engine
    names the stop string it met (vLLM's ``stop_reason``) and it is one of ``stops``."""
    finish = choice.get("finish_reason")
    matched = choice.get("stop_reason")
    if finish == "stop" and isinstance(matched, str) and stops and matched in stops:
        return "stop_sequence", matched
    return STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn", None


def usage_of(usage: Any, request: ChatRequest, output: int = 0) -> dict[str, Any]:
    """Anthropic's usage from a chat ``usage`` (prompt estimate and ``output`` when absent)."""
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return {"input_tokens": prompt if isinstance(prompt, int) else request.prompt_tokens,
            "output_tokens": completion if isinstance(completion, int) else output,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def message_of(body: dict[str, Any], request: ChatRequest, stops: list[str] | None
               ) -> dict[str, Any]:
    """A chat completion ``body`` as an Anthropic ``message`` (text, thinking and tool_use
    blocks in the engine's order: reasoning, text, calls)."""
    choices = body.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    content: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or _tool_id(),
                        "name": fn.get("name", ""), "input": _arguments(fn.get("arguments"))})
    reason, sequence = stop_of(choice, stops)
    return {"id": message_id(request), "type": "message", "role": "assistant",
            "model": body.get("model") or request.model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence,
            "usage": usage_of(body.get("usage"), request)}


def _arguments(raw: Any) -> dict[str, Any]:
    """A call's JSON ``arguments`` as the ``input`` object (``{}`` when not an object)."""
    try:
        parsed = orjson.loads(raw) if isinstance(raw, str) and raw else {}
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _tool_id() -> str:
    return "toolu_" + uuid.uuid4().hex[:24]


def error_body(status: int, error: dict[str, Any], request_id: str | None
               ) -> tuple[int, dict[str, Any]]:
    """``(status, body)`` in Anthropic's error shape for an OpenAI ``error`` object answered
    with ``status``: every 503 (no backend, shed, draining) becomes 529
    ``overloaded_error``, as Anthropic answers an overloaded service."""
    if status == 503:
        status = 529
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    body: dict[str, Any] = {"type": "error", "error": {
        "type": kind, "message": str(error.get("message") or "error")}}
    if request_id is not None:
        body["request_id"] = request_id
    return status, body


def _status_of(error: dict[str, Any]) -> int:
    """The HTTP status an in-stream OpenAI ``error`` object stands for (its type, code)."""
    if error.get("code") == "upstream_timeout":
        return 504
    if error.get("type") == "service_unavailable":
        return 503
    return 400 if error.get("type") == "invalid_request_error" else 500


def event(name: bytes, obj: dict[str, Any]) -> bytes:
    """One SSE event with its ``event:`` line (Anthropic's framing)."""
    return b"event: " + name + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


PING = event(b"ping", {"type": "ping"})


class MessageEvents(ChatChunks):
    """The chat stream of ``request`` → Anthropic's events (module docstring); ``stops``:
    the request's ``stop_sequences``. One per stream."""

    def __init__(self, request: ChatRequest, stops: list[str] | None):
        super().__init__()
        self._request, self._stops = request, stops
        self._started = False
        self._index = -1  # the open block's index (-1: none open)
        self._kind = ""  # the open block's type
        self._tools: dict[int, int] = {}  # chat tool-call index → block index
        self._stop: tuple[str, str | None] = ("end_turn", None)
        self._text_head = b""

    def _reasoning(self, text: str) -> bytes:
        return self._delta("thinking", {"type": "thinking_delta", "thinking": text})

    def _text(self, text: str) -> bytes:
        if self._kind == "text":  # the hot path: one event, its head written once per block
            return self._text_head + orjson.dumps(text) + b"}}\n\n"
        out = self._delta("text", {"type": "text_delta", "text": text})
        self._text_head = (b'event: content_block_delta\ndata: {"type":"content_block_delta",'
                           b'"index":' + str(self._index).encode()
                           + b',"delta":{"type":"text_delta","text":')
        return out

    def _finished(self, choice: dict[str, Any]) -> None:
        self._stop = stop_of(choice, self._stops)

    def failed(self, error: dict[str, Any]) -> bytes:
        """An ``error`` event for an in-stream failure (after a ``message_start``)."""
        _, body = error_body(_status_of(error), error, None)
        return self._start() + event(b"error", body)

    async def done(self) -> bytes:
        """The closing events: the open block's stop, ``message_delta``, ``message_stop``."""
        usage = usage_of(self.usage, self._request, self.chunks)
        reason, sequence = self._stop
        return self._start() + self._close() + event(b"message_delta", {
            "type": "message_delta", "delta": {"stop_reason": reason,
                                               "stop_sequence": sequence},
            "usage": {"output_tokens": usage["output_tokens"],
                      "input_tokens": usage["input_tokens"]}}) + event(
            b"message_stop", {"type": "message_stop"})

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        req = self._request
        return event(b"message_start", {"type": "message_start", "message": {
            "id": message_id(req), "type": "message", "role": "assistant",
            "model": req.model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": usage_of(None, req)}}) + PING

    def _delta(self, kind: str, delta: dict[str, Any]) -> bytes:
        out = b""
        if self._kind != kind:
            start: dict[str, Any] = {"type": "text", "text": ""} if kind == "text" else {
                "type": "thinking", "thinking": "", "signature": ""}
            out = self._open(kind, start)
        return out + event(b"content_block_delta", {"type": "content_block_delta",
                                                    "index": self._index, "delta": delta})

    def _call(self, call: dict[str, Any]) -> bytes:
        """A tool-call delta: a new index opens a ``tool_use`` block (closing the open
        one), arguments go to the open block. Engines stream parallel calls one after the
        other; arguments for a call whose block is already closed cannot be sent (an
        Anthropic block does not reopen) and are left out."""
        index = call.get("index", 0)
        out = b""
        if index not in self._tools:
            fn = call.get("function") or {}
            out = self._open("tool_use", {"type": "tool_use", "id": call.get("id") or _tool_id(),
                                          "name": fn.get("name") or "", "input": {}})
            self._tools[index] = self._index
        args = (call.get("function") or {}).get("arguments")
        if args and self._tools[index] == self._index:
            out += event(b"content_block_delta", {
                "type": "content_block_delta", "index": self._index,
                "delta": {"type": "input_json_delta", "partial_json": args}})
        return out

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._index += 1
        self._kind = kind
        return out + event(b"content_block_start", {"type": "content_block_start",
                                                    "index": self._index,
                                                    "content_block": block})

    def _close(self) -> bytes:
        if not self._kind:
            return b""
        self._kind = ""
        return event(b"content_block_stop", {"type": "content_block_stop",
                                             "index": self._index})
