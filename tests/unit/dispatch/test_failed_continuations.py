"""Item 8 of the reliability cases, over scripted upstreams on loopback: a continuation that
fails keeps the original failure's meaning in the client's error event, and a fallback asked
to continue in the generic form that restarts the answer (or repeats its last words) leaves
no repeated text at the seam (the rule: ``fuse/overlap.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes.router import make_config, open_router
from fakes.streams import content, events
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
ANSWER = "The capital of France is Paris, on the Seine."


def chat() -> dict[str, Any]:
    return {"model": "auto", "stream": True,
            "messages": [{"role": "user", "content": "What is the capital of France?"}]}


def pair(a: Any, b: Any, fallback: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [{"id": "b0", "pool": "general", "base_url": a.base_url, "engine": "vllm"},
            {"id": "b1", "pool": "general", "base_url": b.base_url, "engine": "vllm",
             **(fallback or {})}]


def word(text: str) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


RATE_LIMITED = {"error": {"message": "Rate limit reached for requests", "type": "requests",
                          "code": "rate_limit_exceeded"}}


@pytest.mark.parametrize("fallback_step", [("status", 400), ("status", 503), "inband"],
                         ids=["fallback-400", "fallback-503", "fallback-inband"])
async def test_a_failed_continuation_keeps_the_original_failure(fallback_step):
    """The primary's stream is cut; the fallback refuses the continuation (400, as an engine
    that rejects the prefix would), is down (503), or fails in its turn: the client's error
    event says the connection was cut, not what the fallback said."""
    async with serve_upstream([("cut", 5)], ANSWER) as a, \
            serve_upstream([fallback_step], " Paris.") as b, \
            open_router(make_config(pair(a, b))) as (_, client):
        r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert b.requests and "[DONE]" not in chunks
    error = chunks[-1]["error"]
    assert (error["code"], error["type"]) == ("upstream_connect_error", "upstream_error")
    assert error["message"] == "the connection closed in the middle of the answer"


async def test_a_mid_stream_rate_limit_stays_a_rate_limit_when_the_fallback_fails():
    async with serve_upstream([("raw", [word("The"), RATE_LIMITED])]) as a, \
            serve_upstream([("status", 500)]) as b, \
            open_router(make_config(pair(a, b))) as (_, client):
        r = await client.post(CHAT, json=chat())
    error = events(r.text)[-1]["error"]
    assert len(b.requests) == 1
    assert error["code"] == "rate_limit_exceeded" and "Rate limit" in error["message"]


GENERIC = {"capabilities": ["tools", "logprobs"]}  # no "continuation": the generic form


@pytest.mark.parametrize(("fallback_says", "client_reads"), [
    (ANSWER, ANSWER),                                      # starts the answer over
    ("France is Paris, on the Seine.", ANSWER),            # repeats its last words
    (" Paris, on the Seine.", ANSWER),                     # continues as asked
    ("The French capital is Paris.", "The capital of France isThe French capital is Paris."),
], ids=["restart", "repeated-tail", "true-continuation", "restart-in-other-words"])
async def test_a_generic_fallback_that_restarts_leaves_no_repeat_at_the_seam(
        fallback_says, client_reads):
    """The last case is the rule's stated limit: a restart in other words is not spliced."""
    async with serve_upstream([("cut", 5)], ANSWER) as a, \
            serve_upstream(["ok"], fallback_says) as b, \
            open_router(make_config(pair(a, b, GENERIC))) as (_, client):
        r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert chunks[-1] == "[DONE]" and b.requests
    assert content(chunks[:-1]) == client_reads
    assert [h["reason"] for h in chunks[-2]["llmroute"]["handoffs"]] == ["cut"]


async def test_a_true_continuation_engine_may_repeat_words_of_its_own():
    """``continue_final_message`` continues from the tokens: what it writes is the answer,
    even when it repeats the last words (no overlap is cut)."""
    async with serve_upstream([("cut", 5)], ANSWER) as a, \
            serve_upstream(["ok"], "France is France.") as b, \
            open_router(make_config(pair(a, b))) as (_, client):
        r = await client.post(CHAT, json=chat())
    assert content(events(r.text)[:-1]) == "The capital of France isFrance is France."
