"""Streams that go wrong the quiet way, over scripted upstreams on loopback: a body that ends
cleanly before any ``finish_reason`` is a cut (handed off, or an error event — never a fake
``[DONE]``); an empty ``data:`` event is skipped; keep-alive comments do not count as tokens
for the TTFT and stall timers; a request whose every attempt timed out is a 504."""

from __future__ import annotations

import time
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
