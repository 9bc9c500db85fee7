"""Engine polls shared through a real Redis: of three collectors on one engine only one
polls per interval (the lease holder); the others store its published signals, dated by
the snapshot's age; a failed poll is shared as a failure; losing Redis makes every
replica poll for itself."""

from __future__ import annotations

import contextlib
import time

import pytest
import redis.asyncio as aioredis

from llmroute.anchor.collector import Collector
from llmroute.anchor.store import SignalStore
from llmroute.errors import SignalSourceError
from llmroute.state.polls import SharedPolls
from llmroute.types import Backend, EngineSignals
from tests.fakes.clock import FakeClock

pytestmark = [pytest.mark.slow, pytest.mark.redis]
BACKEND = Backend(id="a", base_url="http://127.0.0.1:9", model="m", pool="general",
                  engine="vllm", context_length=4096)


class Source:
    """A metrics source counting its polls; ``fail`` makes them raise."""

    def __init__(self) -> None:
        self.polls, self.fail = 0, False

    async def poll(self, backend: Backend, now: float) -> EngineSignals:
        self.polls += 1
        if self.fail:
            raise SignalSourceError("engine refused")
        return EngineSignals(taken_at=now, source="vllm", running=3, waiting=2,
                             loaded_models=(("m", 5),), missing=("gpu_util",))


@contextlib.asynccontextmanager
async def collectors(url: str, clock: FakeClock, n: int = 3, timeout_s: float = 0.25):
    """``n`` collectors (each its own store and Redis client) on one shared Source."""
    prefix, source = f"p{time.time_ns()}:", Source()
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for _ in range(n):
            redis = aioredis.Redis.from_url(url)
            stack.push_async_callback(redis.aclose)
            share = SharedPolls(redis, 0.2, prefix=prefix, timeout_s=timeout_s)
            out.append(Collector({"a": (BACKEND, source)}, SignalStore(5.0), clock.now,
                                 share=share))
        yield source, out


async def test_one_replica_polls_and_the_others_read_its_signals(redis_server):
    clock = FakeClock()
    async with collectors(redis_server.url, clock) as (source, fleet):
        for _ in range(4):  # four intervals
            assert [await c.poll_once("a") for c in fleet] == [True] * 3
            clock.advance(0.2)
        assert source.polls == 4  # not 12
        assert [c.polls for c in fleet] == [4, 0, 0]
        got = fleet[2].store.entry("a").signals
        assert (got.running, got.waiting, got.loaded_models, got.missing) == (
            3, 2, (("m", 5),), ("gpu_util",))
        assert clock.now() - 0.3 <= got.taken_at <= clock.now()  # dated by its age


async def test_a_failed_poll_is_shared_as_a_failure(redis_server):
    clock = FakeClock()
    async with collectors(redis_server.url, clock, n=2) as (source, fleet):
        source.fail = True
        assert [await c.poll_once("a") for c in fleet] == [False, False]
        entry = fleet[1].store.entry("a")
        assert (entry.state, entry.error, source.polls) == ("down", "engine refused", 1)


async def test_a_dead_holder_is_replaced_once_its_lease_lapses(redis_server):
    clock = FakeClock()
    async with collectors(redis_server.url, clock, n=2) as (source, fleet):
        await fleet[0].poll_once("a")
        await fleet[1].poll_once("a")
        assert [c.polls for c in fleet] == [1, 0]
        time.sleep(0.45)  # the lease (2 × 0.2 s, Redis's own clock) lapses: holder gone
        await fleet[1].poll_once("a")
        assert [c.polls for c in fleet] == [1, 1]


async def test_without_redis_every_replica_polls_for_itself(own_redis):
    clock = FakeClock()
    async with collectors(own_redis.url, clock, n=2, timeout_s=0.2) as (source, fleet):
        own_redis.kill()
        assert [await c.poll_once("a") for c in fleet] == [True, True]
        assert [c.polls for c in fleet] == [1, 1]
        assert fleet[0].share.up is False
