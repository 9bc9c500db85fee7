"""The replicas' exchange of entries (``state/answers.py``) on a real Redis: an entry and a
purge reach the other replica; a Redis that is gone or paused costs no error and no
request wait (lookups never touch Redis), and the events queued meanwhile are sent later."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from llmroute.cache.answers import AnswerCache, Scope
from llmroute.config.cache import CacheConfig
from llmroute.gate.timely import time_sensitive
from llmroute.state.answers import FleetAnswers
from llmroute.types import ChatRequest, Intent

ANSWER = {"object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
S = Scope("t", "", "r", "k")


def req(text: str) -> ChatRequest:
    return ChatRequest("chat", {"model": "m", "messages": [{"role": "user", "content": text}]},
                       "m", False, text, 5, None, "r1")


async def no_embed(_: ChatRequest) -> None:
    return None


def replica(client: aioredis.Redis, prefix: str) -> tuple[AnswerCache, FleetAnswers]:
    cache = AnswerCache(CacheConfig(enabled=True), no_embed, lambda: 100.0)
    cache.sharing = True
    return cache, FleetAnswers(cache.take_events, cache.apply_event, client, prefix=prefix,
                               timeout_s=0.2)


async def store(cache: AnswerCache, text: str) -> None:
    found = await cache.lookup(req(text), Intent("chat", 1.0), S, {})
    cache.store(found, req(text), Intent("chat", 1.0), S, ANSWER)


async def hit(cache: AnswerCache, text: str) -> bool:
    return (await cache.lookup(req(text), Intent("chat", 1.0), S, {})).entry is not None


async def test_entries_and_purges_reach_the_other_replica(redis_server):
    client = aioredis.Redis.from_url(redis_server.url)
    (one, f1), (two, f2) = replica(client, "fleet-a:"), replica(client, "fleet-a:")
    await store(one, "a question")
    await f1.exchange()
    await f2.exchange()
    assert await hit(two, "a question")
    two.purge("t")
    await f2.exchange()
    await f1.exchange()
    assert not await hit(one, "a question")
    await client.aclose()


async def test_a_lost_redis_is_no_error_and_the_queue_is_sent_later(own_redis):
    client = aioredis.Redis.from_url(own_redis.url)
    (one, f1), (two, f2) = replica(client, "fleet-b:"), replica(client, "fleet-b:")
    own_redis.pause()
    await store(one, "kept meanwhile")
    await asyncio.wait_for(f1.exchange(), 2.0)
    assert not f1.up and f1.outages == 1 and await hit(one, "kept meanwhile")
    own_redis.resume()
    await f1.exchange()
    await f2.exchange()
    assert f1.up and await hit(two, "kept meanwhile")
    await client.aclose()


def test_the_time_sensitivity_detector():
    assert time_sensitive("What's the EUR to USD exchange rate right now?")
    assert time_sensitive("最新的iPhone是哪一款？")
    assert not time_sensitive("Explain how a hash map works.")
    assert not time_sensitive("解释一下哈希表的原理。")
