"""Chat answers in the OpenAI Responses shapes: a chat completion as a ``response`` object,
the chat SSE stream as the Responses' typed events.

The stream follows OpenAI's event order (the ``openai`` SDK's ``ResponseStreamState`` reads
it; vLLM's ``serving_responses.py`` emits the same): ``response.created``,
``response.in_progress``; for the answer's text ``response.output_item.added`` (a
``message``), ``response.content_part.added`` (``output_text``),
``response.output_text.delta``…, ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``; for each tool call
``response.output_item.added`` (a ``function_call``),
``response.function_call_arguments.delta``…, ``…arguments.done``,
``response.output_item.done``; then ``response.completed`` (``response.incomplete`` when the
output budget ran out) with the whole response and its usage. Every event carries its
``sequence_number``. A failure inside the stream ends it with ``response.failed``. Each chat
chunk is translated as it arrives: a fuse handoff, already invisible in the chat stream
(``fuse/seam.py``), stays invisible here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from llmroute.api.surface import ChatChunks
from llmroute.types import ChatRequest

Finish = Callable[[dict[str, Any], dict[str, Any]], Awaitable[None]]
"""Called with the finished response object and the answer's assistant chat message (to
store them) before ``response.completed`` goes out."""


def item_id(prefix: str) -> str:
    """A new output item id (``msg_…``, ``fc_…``)."""
    return prefix + uuid.uuid4().hex


def usage_of(usage: Any, request: ChatRequest, output: int = 0) -> dict[str, Any]:
    """The Responses usage of a chat ``usage`` (the prompt estimate and ``output`` when
    absent)."""
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    prompt = prompt if isinstance(prompt, int) else request.prompt_tokens
    completion = completion if isinstance(completion, int) else output
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached if isinstance(cached, int) else 0,
                                     "cache_write_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion}


class Draft:
    """The ``response`` object of one request: ``response_id``, what the client's ``body``
    asked (echoed as OpenAI echoes it), ``created_at`` epoch seconds."""

    def __init__(self, response_id: str, body: dict[str, Any], model: str):
        self.id, self._body, self._model = response_id, body, model
        self.created_at = int(time.time())

    def response(self, status: str, output: list[dict[str, Any]],
                 usage: dict[str, Any] | None, error: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
        """The response object with ``status`` (``in_progress``, ``completed``,
        ``incomplete``, ``failed``), its ``output`` items, ``usage`` and ``error``."""
        b = self._body
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "model": self._model, "output": output, "usage": usage,
            "error": error, "incomplete_details": incomplete,
            "instructions": b.get("instructions"), "metadata": b.get("metadata") or {},
            "max_output_tokens": b.get("max_output_tokens"),
            "parallel_tool_calls": b.get("parallel_tool_calls", True),
            "previous_response_id": b.get("previous_response_id"),
            "store": b.get("store", True), "temperature": b.get("temperature"),
            "top_p": b.get("top_p"), "tool_choice": b.get("tool_choice", "auto"),
            "tools": b.get("tools") or [], "text": b.get("text") or {"format": {"type": "text"}},
            "user": b.get("user"),
            "completed_at": int(time.time()) if status == "completed" else None}


def message_item(text: str, status: str = "completed", ident: str | None = None
                 ) -> dict[str, Any]:
    """An assistant ``message`` output item holding ``text``."""
    return {"type": "message", "id": ident or item_id("msg_"), "status": status,
            "role": "assistant", "content": [_text_part(text)]}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(call_id: str, name: str, arguments: str, status: str = "completed",
              ident: str | None = None) -> dict[str, Any]:
    """A ``function_call`` output item."""
    return {"type": "function_call", "id": ident or item_id("fc_"), "call_id": call_id,
            "name": name, "arguments": arguments, "status": status}


def assistant_message(output: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat ``assistant`` message the ``output`` items stand for (the conversation a
    follow-up continues)."""
    text = "".join(p["text"] for item in output if item["type"] == "message"
                   for p in item["content"])
    calls = [{"id": i["call_id"], "type": "function",
              "function": {"name": i["name"], "arguments": i["arguments"]}}
             for i in output if i["type"] == "function_call"]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def response_of(body: dict[str, Any], request: ChatRequest, draft: Draft
                ) -> dict[str, Any]:
    """A chat completion ``body`` as the ``response`` object of ``draft``."""
    choices = body.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    output: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        output.append(message_item(message["content"]))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        output.append(call_item(call.get("id") or item_id("call_"), fn.get("name", ""),
                                fn.get("arguments") or ""))
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    if output and status == "incomplete":  # the item the token budget cut short
        output[-1]["status"] = status
    return draft.response(status, output, usage_of(body.get("usage"), request))


class ResponseEvents(ChatChunks):
    """The chat stream of ``request`` → the Responses events of ``draft`` (module
    docstring); ``finish`` is awaited with the final response before its last event."""

    def __init__(self, request: ChatRequest, draft: Draft, finish: Finish):
        super().__init__()
        self._request, self._draft, self._finish = request, draft, finish
        self._seq = 0
        self._started = False
        self._output: list[dict[str, Any]] = []
        self._open: int | None = None  # the output index of the open item
        self._text_so_far: list[str] = []
        self._tools: dict[int, int] = {}  # chat tool-call index → output index
        self._status = "completed"
        self._text_head = b""

    def _finished(self, choice: dict[str, Any]) -> None:
        if choice.get("finish_reason") == "length":
            self._status = "incomplete"

    def failed(self, error: dict[str, Any]) -> bytes:
        """``response.failed`` for an in-stream failure (its OpenAI ``error`` object)."""
        out = self._start() + self._close()
        response = self._draft.response("failed", self._output, None, {
            "code": "server_error", "message": str(error.get("message") or "error")})
        return out + self._event("response.failed", {"response": response})

    async def done(self) -> bytes:
        """The closing events; ``finish`` runs before the last one."""
        out = self._start() + self._close()
        usage = usage_of(self.usage, self._request, self.chunks)
        response = self._draft.response(self._status, self._output, usage)
        await self._finish(response, assistant_message(self._output))
        name = "response.completed" if self._status == "completed" else "response.incomplete"
        return out + self._event(name, {"response": response})

    def _event(self, name: str, fields: dict[str, Any]) -> bytes:
        obj = {"type": name, "sequence_number": self._seq, **fields}
        self._seq += 1
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        response = self._draft.response("in_progress", [], None)
        return self._event("response.created", {"response": response}) + self._event(
            "response.in_progress", {"response": response})

    def _text(self, text: str) -> bytes:
        out = b""
        index = self._open
        if index is None or self._output[index]["type"] != "message":
            out = self._close()
            index = self._added({**message_item("", "in_progress"), "content": []})
            item = self._output[index]
            out += self._added_event(index) + self._event("response.content_part.added", {
                "item_id": item["id"], "output_index": index, "content_index": 0,
                "part": _text_part("")})
            self._text_head = (b',"item_id":' + orjson.dumps(item["id"])
                               + b',"output_index":' + str(index).encode()
                               + b',"content_index":0,"logprobs":[],"delta":')
        self._text_so_far.append(text)
        seq = self._seq
        self._seq += 1  # the hot path: the delta's event written from its parts
        return out + (b'event: response.output_text.delta\ndata: {"type":"response.output_'
                      b'text.delta","sequence_number":' + str(seq).encode()
                      + self._text_head + orjson.dumps(text) + b"}\n\n")

    def _call(self, call: dict[str, Any]) -> bytes:
        """A tool-call delta: a new index adds a ``function_call`` item (closing the open
        one), arguments go to the open item (engines stream parallel calls one after the
        other; late arguments of a closed item are left out, as in ``MessageEvents``)."""
        out = b""
        fn = call.get("function") or {}
        chat_index = call.get("index", 0)
        if chat_index not in self._tools:
            out = self._close()
            index = self._added(call_item(call.get("id") or item_id("call_"),
                                          fn.get("name") or "", "", "in_progress"))
            self._tools[chat_index] = index
            out += self._added_event(index)
        index = self._tools[chat_index]
        args = fn.get("arguments")
        if args and index == self._open:
            self._output[index]["arguments"] += args
            out += self._event("response.function_call_arguments.delta", {
                "item_id": self._output[index]["id"], "output_index": index, "delta": args})
        return out

    def _added(self, item: dict[str, Any]) -> int:
        self._output.append(item)
        self._open = len(self._output) - 1
        return self._open

    def _added_event(self, index: int) -> bytes:
        return self._event("response.output_item.added",
                           {"output_index": index, "item": self._output[index]})

    def _close(self) -> bytes:
        """The done events of the open item, if one is open."""
        index = self._open
        if index is None:
            return b""
        self._open = None
        item = self._output[index]
        item["status"] = self._status  # incomplete: the last item, cut by the token budget
        if item["type"] == "message":
            text, self._text_so_far = "".join(self._text_so_far), []
            part = _text_part(text)
            item["content"] = [part]
            head = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out = self._event("response.output_text.done", {**head, "text": text,
                                                            "logprobs": []})
            out += self._event("response.content_part.done", {**head, "part": part})
        else:
            out = self._event("response.function_call_arguments.done", {
                "item_id": item["id"], "output_index": index, "arguments": item["arguments"]})
        return out + self._event("response.output_item.done",
                                 {"output_index": index, "item": item})
