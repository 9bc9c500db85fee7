"""Router-side load shared through a real Redis: each replica's stats carry the others'
in-flight requests and pending prefill (its own counts unchanged), a replica that stops
writing drops out after ``stale_s``, a draining backend set stops adding the fleet's load,
and losing Redis falls back to the replica's own counts."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import redis.asyncio as aioredis

from llmroute.anchor.stats.router import RouterStats
from llmroute.state.load import FleetLoad
from tests.fakes.clock import FakeClock

pytestmark = [pytest.mark.slow, pytest.mark.redis]


@contextlib.asynccontextmanager
async def fleet(url: str, clock: FakeClock, n: int = 3, **kw):
    """``n`` (stats, FleetLoad) pairs sharing ``url`` under a fresh prefix; not running:
    the test calls ``exchange`` itself."""
    prefix = f"l{time.time_ns()}:"
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for _ in range(n):
            redis = aioredis.Redis.from_url(url)
            stack.push_async_callback(redis.aclose)
            stats = RouterStats.for_backends(["a", "b"])
            out.append((stats, FleetLoad(stats, redis, clock.now, prefix=prefix, **kw)))
        yield out


def _seen(stats: RouterStats) -> dict[str, tuple[int, int]]:
    snap = stats.snapshot(0.0).stats
    return {b: (s.in_flight, s.prefill_tokens) for b, s in snap.items()}


async def _round(replicas, times: int = 2) -> None:
    for _ in range(times):
        for _, load in replicas:
            await load.exchange()


async def test_each_replica_sees_the_fleet_sum_and_keeps_its_own_counts(redis_server):
    clock = FakeClock()
    async with fleet(redis_server.url, clock) as replicas:
        (s0, _), (s1, _), (s2, _) = replicas
        s0.sent("a", 100, 0.0)
        s1.sent("a", 50, 0.0)
        s1.sent("b", 10, 0.0)
        await _round(replicas)
        assert _seen(s0) == {"a": (2, 150), "b": (1, 10)}
        assert _seen(s2) == {"a": (2, 150), "b": (1, 10)}
        assert s0.local_load() == {"a": (1, 100), "b": (0, 0)}
        s1.finished("a", 1.0, ok=True, latency_ms=5.0)
        await _round(replicas)
        assert _seen(s0)["a"] == (1, 150)  # s1 ended without its ticket: prefill pending


async def test_a_replica_that_stops_writing_drops_out_after_stale_s(redis_server):
    clock = FakeClock()
    async with fleet(redis_server.url, clock, stale_s=1.0) as replicas:
        (s0, l0), (s1, l1), _ = replicas
        s1.sent("a", 100, 0.0)
        await _round(replicas)
        assert _seen(s0)["a"] == (1, 100)
        clock.advance(0.5)
        await l0.exchange()
        assert _seen(s0)["a"] == (1, 100)  # unchanged seq, but not stale yet
        clock.advance(1.1)  # past stale_s since l0 last saw l1's seq change
        await l0.exchange()
        assert _seen(s0)["a"] == (0, 0)
        fields = await l0._redis.hkeys(l0._key)
        assert l1.replica.encode() not in fields  # deleted by whoever noticed


async def test_follow_off_counts_only_the_own_requests(redis_server):
    clock = FakeClock()
    async with fleet(redis_server.url, clock, n=2) as replicas:
        (s0, l0), (s1, _) = replicas
        s1.sent("a", 7, 0.0)
        await _round(replicas)
        assert _seen(s0)["a"] == (1, 7)
        l0.follow(False)
        assert _seen(s0)["a"] == (0, 0)
        await _round(replicas)
        assert _seen(s0)["a"] == (0, 0)


async def test_losing_redis_falls_back_to_own_counts_and_recovers(own_redis):
    clock = FakeClock()
    async with fleet(own_redis.url, clock, n=2, timeout_s=0.2) as replicas:
        (s0, l0), (s1, _) = replicas
        s0.sent("a", 1, 0.0)
        s1.sent("a", 1, 0.0)
        await _round(replicas)
        assert _seen(s0)["a"] == (2, 2)
        own_redis.kill()
        await l0.exchange()
        assert (_seen(s0)["a"], l0.up, l0.outages) == ((1, 1), False, 1)
        own_redis.start()
        await _round(replicas, 3)  # a pooled connection's first call after a restart fails
        assert (_seen(s0)["a"], l0.up) == ((2, 2), True)


async def test_run_publishes_on_its_own_and_removes_its_field_on_exit(redis_server):
    clock = FakeClock()
    async with fleet(redis_server.url, clock, n=2, interval_s=0.01) as replicas:
        (s0, l0), (s1, l1) = replicas
        s1.sent("b", 3, 0.0)
        async with l0.run(), l1.run():
            for _ in range(200):
                if _seen(s0)["b"] == (1, 3):
                    break
                await asyncio.sleep(0.01)
            assert _seen(s0)["b"] == (1, 3)
        assert await l0._redis.hkeys(l0._key) == []
