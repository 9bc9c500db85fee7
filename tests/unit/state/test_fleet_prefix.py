"""The prefix index shared through a real Redis: a replica learns what the others sent
where (for its own backends only), a new replica learns what the stream still holds, and
losing Redis leaves each replica routing on its own index."""

from __future__ import annotations

import contextlib
import time

import pytest
import redis.asyncio as aioredis

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.prefix import Affinity
from llmroute.state.prefix import FleetPrefix
from llmroute.types import ChatRequest

pytestmark = [pytest.mark.slow, pytest.mark.redis]

TEXT = "x" * 12 + "y" * 12  # two keys of 4 tokens (12 characters)


def ask(text: str = TEXT) -> ChatRequest:
    return ChatRequest("chat", {}, "m", False, text, len(text) // 3, 8, f"r{time.time_ns()}")


@contextlib.asynccontextmanager
async def replicas(url: str, n: int = 2, backends: tuple[str, ...] = ("a", "b")):
    prefix = f"p{time.time_ns()}:"
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for _ in range(n):
            redis = aioredis.Redis.from_url(url)
            stack.push_async_callback(redis.aclose)
            affinity = Affinity(PrefixIndex(block_tokens=4))
            affinity.share()
            fleet = FleetPrefix(affinity.take_records, affinity.learn, backends, redis,
                                prefix=prefix)
            out.append((affinity, fleet))
        yield out


async def test_a_replica_learns_what_the_others_sent_where(redis_server):
    async with replicas(redis_server.url) as [(a0, f0), (a1, f1)]:
        a0.dispatched(ask(), "b", 8)
        await f0.exchange()
        await f1.exchange()
        assert a1.index.matched(a1.keys(ask())) == {"b": 2}
        await f0.exchange()  # its own entry comes back and is skipped
        assert f0.applied == 0 and f1.applied == 1


async def test_a_late_replica_reads_the_stream_and_foreign_backends_are_ignored(redis_server):
    async with replicas(redis_server.url, 1) as [(a0, f0)]:
        a0.dispatched(ask(), "a", 8)
        a0.dispatched(ask(), "elsewhere", 8)
        await f0.exchange()
        async with replicas(redis_server.url, 1, ("a",)) as [(late, fl)]:
            fl._key = f0._key  # the same fleet's stream
            await fl.exchange()
            assert late.index.matched(late.keys(ask())) == {"a": 2}
            assert fl.ignored == 1


async def test_without_redis_each_replica_keeps_its_own_index():
    redis = aioredis.Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.2)
    affinity = Affinity(PrefixIndex(block_tokens=4))
    affinity.share()
    fleet = FleetPrefix(affinity.take_records, affinity.learn, ("a",), redis)
    affinity.dispatched(ask(), "a", 8)
    await fleet.exchange()
    assert not fleet.up and fleet.outages == 1
    assert affinity.index.matched(affinity.keys(ask())) == {"a": 2}
    assert len(fleet._outbox) == 1  # kept for when Redis is back
    await redis.aclose()
