"""Slow streams handed off (``fuse/pace.py`` in the relay): a stream that crawls at 2 tokens/s
never stalls, yet misses a tokens/s floor or its priority class's end-to-end target; the next
backend continues it inside the same client stream — nothing lost, nothing repeated."""

from __future__ import annotations

from typing import Any

from fakes.router import make_config, open_router
from fakes.streams import content, events
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
PRIMARY = "one two three four five six seven eight nine ten eleven twelve"
FALLBACK = " and the rest, quickly."
SLOW = ("slow", 2, 2.0)  # two words at the usual pace, then 2 words a second


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "auto", "stream": True,
            "messages": [{"role": "user", "content": "Count."}], **extra}


def two(a: Any, b: Any, **extra: Any) -> Any:
    return make_config([{"id": f"b{i}", "pool": "p", "base_url": up.base_url}
                        for i, up in enumerate((a, b))], timeouts={"stall_s": 2.0}, **extra)


def seamless(r: Any, b: Any) -> dict[str, Any]:
    """The handoff of response ``r`` after checking the seam: the client got the words the
    primary sent before it, then the fallback's continuation of exactly those."""
    body = [c for c in events(r.text) if isinstance(c, dict)]
    handoff = body[-1]["llmroute"]["handoffs"][0]
    sent = " ".join(PRIMARY.split(" ")[:handoff["at_token"]])
    assert content(body) == sent + FALLBACK
    assert b.requests[0]["messages"][-1] == {"role": "assistant", "content": sent}
    return handoff


async def test_a_stream_under_the_floor_is_handed_off():
    async with serve_upstream([SLOW], PRIMARY) as a, serve_upstream(["ok"], FALLBACK) as b:
        cfg = two(a, b, fuse={"slow": {"min_tokens_per_s": 5, "window_s": 0.6}})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat())
            metrics = (await client.get("/metrics")).text
    handoff = seamless(r, b)
    assert (handoff["from"], handoff["to"], handoff["reason"]) == ("b0", "b1", "slow")
    assert 2 <= handoff["at_token"] <= 5
    assert 'llmroute_fuse_handoffs_total{backend="b0",reason="slow"} 1.0' in metrics


async def test_a_stream_that_would_miss_its_class_target_is_handed_off():
    priority = {"classes": [{"name": "live", "ttft_target_s": 5, "e2e_target_s": 2.0}],
                "default_class": "live"}
    async with serve_upstream([SLOW], PRIMARY) as a, serve_upstream(["ok"], FALLBACK) as b:
        cfg = two(a, b, priority=priority, fuse={"slow": {"window_s": 0.6}})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat(max_tokens=12))
    assert seamless(r, b)["reason"] == "slow"


async def test_without_a_floor_or_a_target_a_slow_stream_runs_to_its_end():
    async with serve_upstream([("slow", 9, 5.0)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b:
        async with open_router(two(a, b)) as (_, client):
            r = await client.post(CHAT, json=chat())
    assert content(events(r.text)) == PRIMARY and not b.requests


async def test_with_nowhere_to_go_a_slow_stream_finishes_on_its_own():
    async with serve_upstream([("slow", 9, 5.0)], PRIMARY) as a:
        cfg = make_config([{"id": "b0", "pool": "p", "base_url": a.base_url}],
                          fuse={"slow": {"min_tokens_per_s": 50, "window_s": 0.3}})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert content(chunks) == PRIMARY and chunks[-1] == "[DONE]"
