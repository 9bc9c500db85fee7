"""Degradation tiers by pool health: the pure tier choice, and the request path serving the
lighter pool, a canned answer, or 503 with Retry-After."""

from __future__ import annotations

import json

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.config import BreakerConfig, DegradationConfig
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.fuse.degrade import Tier, pool_health, tier
from llmroute.types import Outcome

LIGHT = DegradationConfig(lighter_pool="light")


@pytest.mark.parametrize(("health", "config", "expected"), [
    (1.0, LIGHT, Tier.PRIMARY), (0.95, LIGHT, Tier.PRIMARY), (0.94, LIGHT, Tier.LIGHTER),
    (0.80, LIGHT, Tier.LIGHTER), (0.79, LIGHT, Tier.SHED),
    (0.9, DegradationConfig(), Tier.PRIMARY), (0.1, None, Tier.PRIMARY),
], ids=["full", "at-95", "below-95", "at-80", "below-80", "no-lighter-pool", "unconfigured"])
def test_tier_by_health(health, config, expected):
    assert tier(health, config) is expected


def test_pool_health_counts_open_breakers_as_zero():
    b = CircuitBreaker(BreakerConfig(min_requests=4, failure_rate=0.5))
    for t, failed in enumerate([True, False, False, False]):
        b.record("a", Outcome.FAILURE if failed else Outcome.SUCCESS, t)
    for t in range(4):
        b.record("c", Outcome.FAILURE, t)
    assert pool_health(b, ["a", "b"], 4) == pytest.approx((0.75 + 1.0) / 2)
    assert pool_health(b, ["c", "b"], 4) == pytest.approx(0.5)
    assert pool_health(b, [], 4) == 1.0


def degrade_config(main, light, **tiers):
    return make_config([{"id": "m1", "pool": "main", "base_url": main.base_url},
                        {"id": "m2", "pool": "main", "base_url": main.base_url},
                        {"id": "l1", "pool": "light", "base_url": light.base_url}],
                       breaker={"min_requests": 100},
                       fuse={"degradation": {"main": {"lighter_pool": "light", **tiers}}})


def sicken(rt, failures: int) -> None:
    """m1: ``failures`` failed of 10 in the window (health (10 − f)/10 + 1, halved)."""
    for i in range(10):
        rt.breaker.record("m1", Outcome.FAILURE if i < failures else Outcome.SUCCESS,
                          rt.clock())


@pytest.mark.parametrize(("failures", "backend"), [(0, "m"), (3, "l1")],
                         ids=["healthy-primary", "degraded-lighter"])
async def test_lighter_pool_serves_when_the_pool_is_degraded(failures, backend):
    async with serve_upstream(["ok"]) as main, serve_upstream(["ok"]) as light, \
            open_router(degrade_config(main, light)) as (rt, client):
        sicken(rt, failures)
        r = await client.post("/v1/chat/completions", json={
            "model": "main", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.headers["x-llmroute-backend"].startswith(backend)


async def test_a_failing_pool_sheds_with_503_and_retry_after():
    async with serve_upstream(["ok"]) as main, serve_upstream(["ok"]) as light, \
            open_router(degrade_config(main, light, retry_after_s=7)) as (rt, client):
        sicken(rt, 8)
        r = await client.post("/v1/chat/completions", json={
            "model": "main", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503 and r.headers["retry-after"] == "7"
    assert not main.requests and not light.requests


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_failing_pool_gives_the_canned_answer_when_configured(stream):
    async with serve_upstream(["ok"]) as main, serve_upstream(["ok"]) as light:
        cfg = degrade_config(main, light, canned_answer="Busy - please retry shortly.")
        async with open_router(cfg) as (rt, client):
            sicken(rt, 8)
            r = await client.post("/v1/chat/completions", json={
                "model": "main", "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.headers["x-llmroute-backend"] == "canned"
    if stream:
        data = [json.loads(x[6:]) for x in r.text.split("\n\n")
                if x.startswith("data: {")]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in data)
        assert r.text.endswith("data: [DONE]\n\n")
    else:
        text = r.json()["choices"][0]["message"]["content"]
    assert text == "Busy - please retry shortly." and not main.requests


async def test_a_canned_stream_carries_a_usage_chunk_when_asked():
    async with serve_upstream(["ok"]) as main, serve_upstream(["ok"]) as light:
        cfg = degrade_config(main, light, canned_answer="Busy - please retry shortly.")
        async with open_router(cfg) as (rt, client):
            sicken(rt, 8)
            r = await client.post("/v1/chat/completions", json={
                "model": "main", "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "hi"}]})
    data = [json.loads(x[6:]) for x in r.text.split("\n\n") if x.startswith("data: {")]
    assert data[-1]["choices"] == [] and data[-1]["usage"]["total_tokens"] == 0
    assert r.text.endswith("data: [DONE]\n\n")
