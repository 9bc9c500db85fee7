"""Streams that go wrong the quiet way, over scripted upstreams on loopback: a body that ends
cleanly before any ``finish_reason`` is a cut (handed off, or an error event — never a fake
``[DONE]``); an empty ``data:`` event is skipped; keep-alive comments do not count as tokens
for the TTFT and stall timers; a request whose every attempt timed out is a 504."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fakes.router import make_config, open_router
from fakes.streams import content, events
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
PRIMARY = "The quick brown fox jumps"
FALLBACK = " over the lazy dog."


def chat(stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {"model": "auto", "stream": stream,
            "messages": [{"role": "user", "content": "Tell me about the fox."}], **extra}


def backends(*ups: Any, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"b{i}", "pool": "general", "base_url": up.base_url, "engine": "vllm",
             **extra} for i, up in enumerate(ups)]


async def test_a_body_that_ends_before_a_finish_reason_is_handed_off():
    async with serve_upstream([("clean_end", 2)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b, \
            open_router(make_config(backends(a, b))) as (rt, client):
        r = await client.post(CHAT, json=chat())
        stats = rt.stats.snapshot(rt.clock()).stats["b0"]
    chunks = events(r.text)
    assert chunks[-1] == "[DONE]"
    assert content(chunks) == "The quick" + FALLBACK
    handoffs = chunks[-2]["llmroute"]["handoffs"]
    assert [(h["from"], h["to"], h["reason"]) for h in handoffs] == [("b0", "b1", "cut")]
    assert stats.window_error_rate == 1.0


async def test_a_truncated_body_with_nowhere_to_go_ends_with_an_error_event():
    async with serve_upstream([("clean_end", 2)], PRIMARY) as a, \
            open_router(make_config(backends(a))) as (_, client):
        r = await client.post(CHAT, json=chat())
        metrics = (await client.get("/metrics")).text
    chunks = events(r.text)
    assert "[DONE]" not in chunks
    assert chunks[-1]["error"]["code"] == "upstream_connect_error"
    assert "finish_reason" in chunks[-1]["error"]["message"]
    assert 'llmroute_fuse_dead_ends_total{backend="b0",reason="cut"} 1.0' in metrics


@contextlib.asynccontextmanager
async def close_delimited(words: list[str]) -> AsyncIterator[str]:
    """A raw HTTP/1.1 engine whose SSE body has no length and no chunking: it ends when the
    connection closes, here after ``words`` and before any finish_reason."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n")
                      if h.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Connection: close\r\n\r\n")
        for w in words:
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                     "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}
            writer.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


async def test_a_close_delimited_body_cut_before_a_finish_reason_is_handed_off():
    async with close_delimited(["The", " quick"]) as url, \
            serve_upstream(["ok"], FALLBACK) as b:
        cfg = make_config([{"id": "b0", "pool": "general", "base_url": url},
                           {"id": "b1", "pool": "general", "base_url": b.base_url}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert chunks[-1] == "[DONE]" and content(chunks) == "The quick" + FALLBACK
    assert chunks[-2]["llmroute"]["handoffs"][0]["reason"] == "cut"


async def test_done_without_a_finish_reason_is_not_a_whole_answer():
    first = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "Half"}, "finish_reason": None}]}
    async with serve_upstream([("raw", [first])]) as a, \
            open_router(make_config(backends(a))) as (_, client):
        r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert "[DONE]" not in chunks and chunks[-1]["error"]["code"] == "upstream_connect_error"


async def test_an_empty_data_event_is_skipped():
    async with serve_upstream(["empty_data"], PRIMARY) as a, \
            open_router(make_config(backends(a))) as (_, client):
        r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert chunks[-1] == "[DONE]" and content(chunks) == PRIMARY
    assert chunks[-2]["llmroute"]["handoffs"] == []


@pytest.mark.parametrize("step", [("keepalive", 3), ("keepalive_ttft", 3)],
                         ids=["stall", "ttft"])
async def test_keep_alive_comments_do_not_reset_the_token_timers(step):
    timeouts = {"stall_s": 0.3, "ttft_s": 0.3}
    async with serve_upstream([step], PRIMARY) as a, serve_upstream(["ok"], FALLBACK) as b, \
            open_router(make_config(backends(a, b), timeouts=timeouts)) as (_, client):
        t0 = time.monotonic()
        r = await client.post(CHAT, json=chat())
        elapsed = time.monotonic() - t0
    assert elapsed < 2.0
    assert len(b.requests) == 1
    assert events(r.text)[-1] == "[DONE]"


async def test_ttft_and_stall_can_be_set_per_backend():
    async with serve_upstream([("keepalive", 3)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b:
        cfg = make_config([*backends(a, stall_s=0.3)[:1],
                           {"id": "b1", "pool": "general", "base_url": b.base_url}])
        async with open_router(cfg) as (_, client):
            t0 = time.monotonic()
            r = await client.post(CHAT, json=chat())
            elapsed = time.monotonic() - t0
    assert elapsed < 2.0 and len(b.requests) == 1
    assert events(r.text)[-2]["llmroute"]["handoffs"][0]["reason"] == "stall"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_every_attempt_timed_out_is_a_504(stream):
    timeouts = {"ttft_s": 0.2, "total_s": 0.2}
    async with serve_upstream([("hang", 3)]) as a, serve_upstream([("hang", 3)]) as b, \
            open_router(make_config(backends(a, b), timeouts=timeouts)) as (_, client):
        r = await client.post(CHAT, json=chat(stream))
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "upstream_timeout"
