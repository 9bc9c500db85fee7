"""Dispatch alone: ``send`` (JSON and SSE) driven with a hand-built ``Deps`` (no Runtime, no
app, no config file) over scripted upstreams on loopback, with a clock that moves 0.5 s per
reading."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from fakes.upstream import serve_upstream

from llmroute import dispatch
from llmroute.anchor.prefix import Affinity
from llmroute.anchor.stats.router import RouterStats
from llmroute.backends.client import BackendClient
from llmroute.config import BreakerConfig, FuseConfig, RetryConfig, TimeoutConfig
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.observe.fuse_events import FuseEventStore
from llmroute.observe.metrics import Metrics
from llmroute.types import Backend, BreakerState, Candidate, ChatRequest, RoutePlan

PROMPT = "Tell me about the fox. " * 40  # one full affinity key (768 characters)


@contextlib.asynccontextmanager
async def deps_over(backends: list[Backend]) -> AsyncIterator[dispatch.Deps]:
    ids = [b.id for b in backends]
    clock = functools.partial(next, itertools.count(0.0, 0.5))
    breaker = CircuitBreaker(BreakerConfig(min_requests=1))
    events = FuseEventStore()
    async with aiohttp.ClientSession() as session:
        yield dispatch.Deps(BackendClient(session, TimeoutConfig()), breaker,
                            RouterStats.for_backends(ids, breakers=breaker.views), Affinity(),
                            Metrics(breaker.views, ids, clock), events,
                            RetryConfig(backoff_base_s=0.0, backoff_max_s=0.0), FuseConfig(),
                            {"general": tuple(ids)}, clock, lambda: 1_700_000_000.0,
                            random.Random(0))
    events.close()


def backends(*ups: Any) -> list[Backend]:
    return [Backend(f"b{i}", "general", "vllm", up.base_url, "m", 4096)
            for i, up in enumerate(ups)]


def request(stream: bool) -> ChatRequest:
    body = {"model": "auto", "stream": stream, "messages": [{"role": "user", "content": PROMPT}]}
    return ChatRequest("chat", body, "auto", stream, PROMPT, 60, None, "req-1")


def plan(bs: list[Backend]) -> RoutePlan:
    return RoutePlan("general", "test", tuple(b.id for b in bs))


def budget(bs: list[Backend]) -> dispatch.Budget:
    return dispatch.Budget([Candidate(x, 1.0) for x in bs], 3)


async def test_complete_fails_over_and_settles_each_attempt():
    async with serve_upstream([("status", 503)]) as a, serve_upstream(["ok"]) as b:
        bs = backends(a, b)
        async with deps_over(bs) as deps:
            served, answer, _ = await dispatch.send(deps, request(False), plan(bs),
                                                    budget(bs))
            stats = deps.stats.snapshot(10.0).stats
            opened = deps.breaker.state("b0", 2.0)  # opened at 0.5, cools down for 5 s
            affinity = deps.affinity.index.matched(deps.affinity.keys(request(False)))
    assert served.id == "b1"
    assert answer["choices"][0]["message"]["content"] == "Hello from the fake engine."
    assert len(a.requests) == 1 and len(b.requests) == 1
    # clock readings: b0 begins at 0.0 and fails at 0.5; b1 begins at 1.0, answers at 1.5
    assert stats["b1"].latency_ms == 500.0 and stats["b1"].in_flight == 0
    assert stats["b0"].in_flight == 0 and stats["b0"].error_rate > 0
    assert opened is BreakerState.OPEN
    assert affinity == {"b0": 1, "b1": 1}  # recorded as each attempt was sent


async def test_open_stream_hands_off_mid_stream_and_records_the_event():
    async with serve_upstream([("cut", 2)], "The quick brown fox") as a, \
            serve_upstream(["ok"], " jumps.") as b:
        bs = backends(a, b)
        async with deps_over(bs) as deps:
            first, _, stream = await dispatch.send(deps, request(True), plan(bs), budget(bs))
            data = b"".join([part async for part in stream]).decode()
            events = await deps.fuse_events.recent(5)
            stats = deps.stats.snapshot(100.0).stats
    chunks = [json.loads(line[6:]) for line in data.split("\n\n")
              if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or ""
                   for c in chunks if c.get("choices"))
    assert first.id == "b0" and data.endswith("data: [DONE]\n\n")
    assert text == "The quick jumps."
    assert [(e["backend"], e["to_backend"], e["reason"]) for e in events] == [
        ("b0", "b1", "cut")]
    assert stats["b0"].in_flight == 0 and stats["b1"].in_flight == 0
    assert stats["b1"].ttft_ms == 500.0
