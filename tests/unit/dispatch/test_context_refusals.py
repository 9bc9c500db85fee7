"""Context-length refusals in every engine's words, over scripted upstreams on loopback:
before the first byte (any status) and in-band mid-stream, the request moves only to a
backend with a larger context, and the refusing backend's breaker is never blamed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes.router import make_config, open_router
from fakes.streams import content, events
from fakes.upstream import CONTEXT_ERRORS, serve_upstream

CHAT = "/v1/chat/completions"


def chat(stream: bool) -> dict[str, Any]:
    return {"model": "auto", "stream": stream,
            "messages": [{"role": "user", "content": "A long story, please."}]}


def three(small: Any, same: Any, big: Any) -> Any:
    return make_config([
        {"id": "small", "pool": "general", "base_url": small.base_url, "context_length": 2048},
        {"id": "same", "pool": "general", "base_url": same.base_url, "context_length": 2048},
        {"id": "big", "pool": "general", "base_url": big.base_url, "context_length": 8192}],
        breaker={"min_requests": 1, "cooldown_s": 60})


def rank_small_first(rt: Any) -> None:
    rt.stats.finished("same", 0, ok=True, latency_ms=5000)
    rt.stats.finished("big", 0, ok=True, latency_ms=9000)


@pytest.mark.parametrize("status", [400, 413, 500], ids=lambda s: str(s))
@pytest.mark.parametrize("engine", ["vllm-v1", "sglang", "llamacpp-old", "openai"])
async def test_every_wording_moves_to_a_larger_context_without_blame(engine, status):
    async with serve_upstream([("context", engine, status)]) as small, \
            serve_upstream(["ok"]) as same, serve_upstream(["ok"]) as big:
        async with open_router(three(small, same, big)) as (rt, client):
            rank_small_first(rt)
            r = await client.post(CHAT, json=chat(stream=False))
            closed = rt.breaker.allow("small", rt.clock())
    assert r.status_code == 200 and r.headers["x-llmroute-backend"] == "big"
    assert not same.requests and closed


async def test_a_refusal_with_no_larger_context_is_the_clients_400():
    async with serve_upstream([("context", "sglang", 500)]) as small, \
            open_router(make_config([{"id": "small", "pool": "general",
                                      "base_url": small.base_url}])) as (_, client):
        r = await client.post(CHAT, json=chat(stream=False))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


REFUSAL = json.dumps(CONTEXT_ERRORS["sglang"])
FIRST = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"content": "Once"}, "finish_reason": None}]}


async def test_an_in_band_refusal_mid_stream_hands_off_to_a_larger_context():
    async with serve_upstream([("raw", [FIRST, REFUSAL])]) as small, \
            serve_upstream(["ok"], " upon a time.") as same, \
            serve_upstream(["ok"], " upon a time.") as big:
        async with open_router(three(small, same, big)) as (rt, client):
            rank_small_first(rt)
            r = await client.post(CHAT, json=chat(stream=True))
            closed = rt.breaker.allow("small", rt.clock())
    chunks = events(r.text)
    assert chunks[-1] == "[DONE]" and content(chunks) == "Once upon a time."
    assert chunks[-2]["llmroute"]["handoffs"][0]["to"] == "big"
    assert not same.requests and closed
