"""OpenAI answer shapes the strategy kinds build and read: an answer made of given text, a
non-streamed answer replayed as SSE chunks, the text of an answer, and a leg's request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from llmroute.backends.sse import DONE, encode_json
from llmroute.types import ChatRequest

JUDGE_TOKENS = 32
"""Output tokens a leg asking for a short verdict may use."""


def text_answer(request: ChatRequest, text: str, created: int,
                extension: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed answer of ``text`` in ``request``'s endpoint shape (finish_reason
    ``stop``, zero usage), carrying ``extension`` as its ``llmroute`` field; ``created``
    epoch seconds."""
    chat = request.endpoint == "chat"
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {"id": f"chatcmpl-{request.request_id}",
            "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": request.model, "choices": [choice], "llmroute": extension,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}


def answer_text(body: dict[str, Any]) -> str:
    """The first choice's text (chat ``message.content`` or completion ``text``); ``""``
    when there is none."""
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else {}
    if not isinstance(first, dict):
        return ""
    message = first.get("message")
    text = message.get("content") if isinstance(message, dict) else first.get("text")
    return text if isinstance(text, str) else ""


def without_logprobs(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a non-streamed answer) with its choices' ``logprobs`` left out (a leg
    asked for them; the client did not)."""
    return {**body, "choices": [{k: v for k, v in c.items() if k != "logprobs"}
                                if isinstance(c, dict) else c
                                for c in body.get("choices", [])]}


def chunks(request: ChatRequest, body: dict[str, Any]) -> list[dict[str, Any]]:
    """``body`` (a non-streamed answer) as stream chunks: the text, then the finish chunk
    with the answer's ``llmroute`` field, then (with ``stream_options.include_usage``) a
    usage chunk."""
    chat = request.endpoint == "chat"
    head = {"id": body.get("id", f"chatcmpl-{request.request_id}"),
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": body.get("created", 0), "model": body.get("model", request.model)}
    first = (body.get("choices") or [{}])[0]
    finish = first.get("finish_reason") or "stop"
    text = answer_text(body)
    if chat:
        opening = {"index": 0, "delta": {"role": "assistant", "content": text},
                   "finish_reason": None}
        closing = {"index": 0, "delta": {}, "finish_reason": finish}
    else:
        opening = {"index": 0, "text": text, "finish_reason": None}
        closing = {"index": 0, "text": "", "finish_reason": finish}
    out = [{**head, "choices": [opening]}, {**head, "choices": [closing]}]
    if "llmroute" in body:
        out[-1]["llmroute"] = body["llmroute"]
    options = request.body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and "usage" in body:
        out.append({**head, "choices": [], "usage": body["usage"]})
    return out


async def replay(request: ChatRequest, body: dict[str, Any]) -> AsyncIterator[bytes]:
    """``chunks(request, body)`` as SSE events, then ``[DONE]``."""
    for chunk in chunks(request, body):
        yield encode_json(chunk)
    yield DONE


def conversation(request: ChatRequest) -> list[dict[str, Any]]:
    """The request's chat ``messages``, or its completion ``prompt`` as one user turn."""
    messages = request.body.get("messages")
    if isinstance(messages, list):
        return messages
    return [{"role": "user", "content": request.text}]


def last_user(request: ChatRequest) -> str:
    """The text of the last user turn (the whole prompt for a completion)."""
    for message in reversed(conversation(request)):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content
                               if isinstance(p, dict) and isinstance(p.get("text"), str))
    return request.text


def non_streamed(request: ChatRequest, logprobs: bool = False) -> ChatRequest:
    """``request`` as a non-streamed leg (no ``stream_options``; asking for ``logprobs``
    when told)."""
    body = {k: v for k, v in request.body.items() if k != "stream_options"}
    body["stream"] = False
    if logprobs:
        body["logprobs"] = True
    return request._replace(body=body, stream=False)


def with_text(body: dict[str, Any], text: str) -> dict[str, Any]:
    """``body`` (a non-streamed answer) with its first choice's text replaced by ``text``."""
    choices = [dict(c) if isinstance(c, dict) else c for c in body.get("choices") or [{}]]
    first = choices[0]
    if isinstance(first.get("message"), dict):
        first["message"] = {**first["message"], "content": text}
    else:
        first["text"] = text
    return {**body, "choices": choices}


def leg_request(parent: ChatRequest, prompt: str, suffix: str,
                max_tokens: int = JUDGE_TOKENS) -> ChatRequest:
    """A non-streamed one-turn chat request of ``prompt`` made for ``parent`` (request id
    ``<parent id>-<suffix>``), at temperature 0 and at most ``max_tokens`` output tokens;
    its prompt tokens are estimated at 4 characters a token."""
    body = {"model": parent.model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0, "stream": False}
    return ChatRequest("chat", body, parent.model, False, prompt, len(prompt) // 4 + 1,
                       max_tokens, f"{parent.request_id}-{suffix}")
