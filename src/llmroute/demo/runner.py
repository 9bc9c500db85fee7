"""Send demo conversations to a running router over HTTP and measure each answer.

TTFT (ms) is measured at the client to the first streamed content or tool-call delta;
tokens/s is completion tokens (from ``usage``) over the decode time after the first token
(streams) or over the whole request (non-streamed).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from llmroute.backends.sse import SSEDecoder
from llmroute.demo.prompts import Conversation


@dataclass(frozen=True)
class Row:
    """One request's outcome, as printed by the demo."""

    label: str
    prompt: str
    stream: bool
    status: int
    intent: str = "-"
    pool: str = "-"
    backend: str = "-"
    ttft_ms: float | None = None
    total_ms: float = 0.0
    tokens: int = 0
    handoffs: int = 0
    answer: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        """Answered: HTTP 200, no error event, and some text or a tool call."""
        return self.status == 200 and not self.error and bool(self.answer)

    @property
    def tokens_per_s(self) -> float | None:
        """Output tokens per second of decode (None when unknown)."""
        span_ms = self.total_ms - (self.ttft_ms or 0.0)
        return self.tokens / span_ms * 1000 if self.tokens and span_ms > 0 else None


@dataclass
class _Answer:
    text: str = ""
    tools: str = ""
    first_at: float | None = None
    tokens: int = 0
    handoffs: int = 0
    error: str = ""


async def run_conversation(session: aiohttp.ClientSession, url: str, conv: Conversation,
                           max_tokens: int) -> AsyncIterator[Row]:
    """Send every turn of ``conv`` (each with the earlier answers in the history)."""
    history = list(conv.base.get("messages", []))
    for turn in conv.turns or (None,):
        if turn is not None:
            history.append({"role": "user", "content": turn})
        body = {"model": "auto", "max_tokens": max_tokens, **conv.base, "messages": history,
                "stream": conv.stream}
        if conv.stream:
            body["stream_options"] = {"include_usage": True}
        row = await send(session, url, conv.label, body)
        yield row
        history.append({"role": "assistant", "content": row.answer})


async def send(session: aiohttp.ClientSession, url: str, label: str,
               body: dict[str, Any]) -> Row:
    """POST one chat request; never raises for HTTP or transport errors (they become rows)."""
    start = time.perf_counter()
    head = _head(body)
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            ans = await (_read_stream(resp) if body.get("stream") else _read_json(resp))
            return _row(label, head, body, resp, ans, start)
    except aiohttp.ClientError as exc:
        return Row(label, head, bool(body.get("stream")), 0, error=str(exc))


def _row(label: str, head: str, body: dict[str, Any], resp: aiohttp.ClientResponse,
         ans: _Answer, start: float) -> Row:
    h = resp.headers
    ttft = (ans.first_at - start) * 1000 if ans.first_at else None
    return Row(label, head, bool(body.get("stream")), resp.status,
               h.get("x-llmroute-intent", "-"), h.get("x-llmroute-pool", "-"),
               h.get("x-llmroute-backend", "-"), ttft, (time.perf_counter() - start) * 1000,
               ans.tokens, ans.handoffs, ans.text or ans.tools, ans.error)


def _head(body: dict[str, Any]) -> str:
    user = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = user[-1].get("content") if user else ""
    text = content if isinstance(content, str) else str(content)
    return " ".join(text.split())[:48]


async def _read_json(resp: aiohttp.ClientResponse) -> _Answer:
    obj = orjson.loads(await resp.read())
    if resp.status != 200:
        return _Answer(error=str(obj.get("error", {}).get("message", resp.status)))
    msg = obj["choices"][0]["message"]
    tools = orjson.dumps(msg["tool_calls"]).decode() if msg.get("tool_calls") else ""
    tokens = (obj.get("usage") or {}).get("completion_tokens", 0)
    return _Answer(msg.get("content") or "", tools, None, tokens)


async def _read_stream(resp: aiohttp.ClientResponse) -> _Answer:
    if resp.status != 200:
        return await _read_json(resp)
    ans, decoder = _Answer(), SSEDecoder()
    async for data in resp.content.iter_any():
        for event in decoder.feed(data):
            if event.data != "[DONE]":
                _absorb(ans, orjson.loads(event.data))
    return ans


def _absorb(ans: _Answer, obj: dict[str, Any]) -> None:
    if "error" in obj:
        ans.error = str(obj["error"].get("message"))
        return
    ans.handoffs += len((obj.get("llmroute") or {}).get("handoffs", []))
    ans.tokens = (obj.get("usage") or {}).get("completion_tokens", ans.tokens)
    for choice in obj.get("choices") or []:
        delta = choice.get("delta") or {}
        if (delta.get("content") or delta.get("tool_calls")) and ans.first_at is None:
            ans.first_at = time.perf_counter()
        ans.text += delta.get("content") or ""
        if delta.get("tool_calls"):
            ans.tools += orjson.dumps(delta["tool_calls"]).decode()
