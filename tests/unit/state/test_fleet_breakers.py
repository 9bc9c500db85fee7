"""Breakers shared through a real Redis: an open on one replica is adopted by the others
(no request waits: they read their local copy), half-open probes are one replica's (the
probe lease), a close is adopted too, and losing Redis leaves the local breakers working."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from llmroute.config import BreakerConfig
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.state.breakers import FleetBreakers
from llmroute.state.guard import Guarded
from llmroute.state.redis import RedisStore
from llmroute.types import BreakerState, Outcome
from tests.fakes.clock import FakeClock

pytestmark = [pytest.mark.slow, pytest.mark.redis]
CONFIG = BreakerConfig(window_s=30, min_requests=2, failure_rate=0.5, cooldown_s=5,
                       half_open_probes=1)


@contextlib.asynccontextmanager
async def replicas(url: str, clock: FakeClock, n: int = 3):
    """``n`` breakers sharing ``url`` (each its own FleetBreakers and store)."""
    prefix = f"b{time.time_ns()}:"
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for _ in range(n):
            breaker = CircuitBreaker(CONFIG, fleet_probes=True)
            store = Guarded(RedisStore(url, 0.25, prefix=prefix), fail_closed=False,
                            retry_s=0.1, clock=time.monotonic)
            stack.push_async_callback(store.close)
            fleet = FleetBreakers(breaker, url, store, clock.now, prefix=prefix)
            await stack.enter_async_context(fleet.run())
            out.append((breaker, fleet))
        await asyncio.sleep(0.3)  # subscribed
        yield out


async def _until(predicate, timeout_s: float = 2.0) -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout_s, "not within the time"
        await asyncio.sleep(0.005)
    return time.monotonic() - started


async def test_open_spreads_probes_are_fleet_wide_and_close_spreads(redis_server):
    clock = FakeClock(100.0)
    async with replicas(redis_server.url, clock) as fleet:
        (first, _), *others = fleet
        for _ in range(2):
            first.record("a", Outcome.FAILURE, clock.now())
        assert first.state("a", clock.now()) is BreakerState.OPEN
        took = await _until(lambda: all(b.state("a", clock.now()) is BreakerState.OPEN
                                        for b, _ in others))
        assert took < 1.0
        clock.advance(CONFIG.cooldown_s + 0.1)
        for _, f in fleet:
            await f.sync_probes()
        allowed = [b for b, _ in fleet if b.allow("a", clock.now())]
        assert len(allowed) == 1  # one probe for the whole fleet
        holder = allowed[0]
        holder.begin("a", clock.now())
        holder.record("a", Outcome.SUCCESS, clock.now())
        await _until(lambda: all(b.state("a", clock.now()) is BreakerState.CLOSED
                                 for b, _ in fleet))
        assert all(b.allow("a", clock.now()) for b, _ in fleet)


async def test_without_redis_the_local_breaker_opens_and_probes_alone(own_redis):
    clock = FakeClock(100.0)
    async with replicas(own_redis.url, clock, n=1) as fleet:
        own_redis.kill()
        breaker, f = fleet[0]
        for _ in range(2):
            breaker.record("a", Outcome.FAILURE, clock.now())
        assert not breaker.allow("a", clock.now())
        clock.advance(CONFIG.cooldown_s + 0.1)
        await f.sync_probes()
        assert breaker.allow("a", clock.now())  # the probe lease fails open
