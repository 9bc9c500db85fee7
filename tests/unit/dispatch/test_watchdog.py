"""A non-streamed request to an engine that froze fails over within its TTFT bound once the
collector sees the engine dark; a long answer from an engine that still answers its polls is
waited for."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from fakes.upstream import serve_upstream

from llmroute import dispatch
from llmroute.anchor.prefix import Affinity
from llmroute.anchor.stats.router import RouterStats
from llmroute.backends.client import BackendClient
from llmroute.config import BreakerConfig, FuseConfig, RetryConfig, TimeoutConfig
from llmroute.dispatch.watchdog import bounded
from llmroute.errors import UpstreamTimeout
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.observe.fuse_events import FuseEventStore
from llmroute.observe.metrics import Metrics
from llmroute.types import Backend, Candidate, ChatRequest, RoutePlan

BODY = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def _deps(session, ids, dark_ids: set[str]) -> dispatch.Deps:
    breaker = CircuitBreaker(BreakerConfig())
    stats = RouterStats.for_backends(ids, breakers=breaker.views,
                                     dark=lambda now: frozenset(dark_ids))
    return dispatch.Deps(BackendClient(session, TimeoutConfig(ttft_s=0.3)), breaker, stats,
                         Affinity(), Metrics(breaker.views, ids, time.monotonic),
                         FuseEventStore(), RetryConfig(backoff_base_s=0.0, backoff_max_s=0.0),
                         FuseConfig(), {"general": tuple(ids)}, time.monotonic, time.time,
                         __import__("random").Random(0))


async def _ask(ups, dark_ids: set[str], engine: str = "vllm"):
    bs = [Backend(f"b{i}", "general", engine, up.base_url, "m", 4096)
          for i, up in enumerate(ups)]
    request = ChatRequest("chat", BODY, "auto", False, "hi", 5, None, "req-1")
    async with aiohttp.ClientSession() as session:
        deps = _deps(session, [b.id for b in bs], dark_ids)
        started = time.monotonic()
        sent = await dispatch.send(deps, request, RoutePlan("general", "t",
                                                            tuple(b.id for b in bs)),
                                   dispatch.Budget([Candidate(b, 1.0) for b in bs], 3))
        return sent.backend.id, time.monotonic() - started


async def test_a_frozen_engine_fails_over_within_its_ttft_bound():
    async with serve_upstream([("hang", 30.0)]) as frozen, serve_upstream(["ok"]) as healthy:
        served, took = await _ask([frozen, healthy], dark_ids={"b0"})
    assert served == "b1"
    assert 0.3 <= took < 2.0  # the 30 s hang was cut just past the 0.3 s bound
    assert frozen.cancelled == 1  # the router closed the frozen engine's connection


async def test_a_long_answer_from_an_engine_still_polled_is_waited_for():
    async with serve_upstream([("hang", 1.0)]) as slow, serve_upstream(["ok"]) as other:
        served, took = await _ask([slow, other], dark_ids=set())
    assert served == "b0" and took >= 1.0 and other.requests == []


async def test_an_engine_kind_never_polled_is_never_cut_as_dark():
    # ``openai`` has no metrics endpoint: the collector never polls it, so it cannot go
    # dark, and its calls run without the watchdog (here even a dark reader naming it)
    async with serve_upstream([("hang", 0.6)]) as slow, serve_upstream(["ok"]) as other:
        served, took = await _ask([slow, other], dark_ids={"b0"}, engine="openai")
    assert served == "b0" and took >= 0.6 and other.requests == []


async def test_without_a_dark_reader_only_the_call_bounds_it():
    async def answer() -> str:
        await asyncio.sleep(0.05)
        return "done"
    assert await bounded(answer(), "b0", 0.01, None, time.monotonic) == "done"


async def test_an_outside_cancel_is_not_taken_for_a_frozen_engine():
    async def forever() -> None:
        await asyncio.sleep(30)

    task = asyncio.create_task(bounded(forever(), "b0", 0.05, lambda now: frozenset(),
                                       time.monotonic))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_watchdog_raises_an_engine_timeout():
    async def forever() -> None:
        await asyncio.sleep(30)

    with pytest.raises(UpstreamTimeout) as err:
        await bounded(forever(), "b0", 0.05, lambda now: frozenset({"b0"}), time.monotonic)
    assert err.value.phase == "ttft" and err.value.backend_id == "b0"
