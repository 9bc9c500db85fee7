"""The shared prefix index's cost in ``bench/scale.py``: replicas, each an ``Affinity``
with its ``FleetPrefix`` (``state/prefix.py``) exchanging every 100 ms through one Redis,
while requests with distinct prompts are dispatched round-robin over them at a steady
rate. Reported: Redis round trips per request (every exchange is one pipelined round
trip; a request makes none), Redis commands per request (``INFO commandstats``) and the
share of all records each replica has learned by the end (after one more exchange each)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import redis.asyncio as aioredis

from llmroute.anchor.prefix import Affinity
from llmroute.state.prefix import FleetPrefix
from llmroute.types import ChatRequest

BACKENDS = tuple(f"gpu-{i}" for i in range(8))


async def prefix_sharing(url: str, replicas: int, rate: float, seconds: float,
                         commands: object) -> dict[str, float]:
    """Run the replicas for ``seconds`` at ``rate`` requests per second in all;
    ``commands(url)`` reads Redis's command count."""
    prefix = f"share{uuid.uuid4().hex[:8]}:"
    async with contextlib.AsyncExitStack() as stack:
        fleet = []
        for _ in range(replicas):
            redis = aioredis.Redis.from_url(url)
            stack.push_async_callback(redis.aclose)
            affinity = Affinity()
            affinity.share()
            share = FleetPrefix(affinity.take_records, affinity.learn, BACKENDS, redis,
                                prefix=prefix)
            fleet.append((affinity, share))
        before = await commands(url)  # type: ignore[operator]
        for _, share in fleet:
            await stack.enter_async_context(share.run())
        sent = await _dispatch(fleet, rate, seconds)
        exchanges = _exchanges(fleet)
        await asyncio.sleep(0.3)
        used = await commands(url) - before  # type: ignore[operator]
    learned = [sum(a.index.matched(a.keys(r)).get(b, 0) > 0 for r, b in sent) / len(sent)
               for a, _ in fleet]
    return {"prefix_share_round_trips_per_request": round(exchanges / len(sent), 3),
            "prefix_share_redis_commands_per_request": round(used / len(sent), 3),
            "prefix_share_learned_min": round(min(learned), 4)}


async def _dispatch(fleet: list[tuple[Affinity, FleetPrefix]], rate: float,
                    seconds: float) -> list[tuple[ChatRequest, str]]:
    sent = []
    for i in range(int(rate * seconds)):
        text = f"{i:09d}" + "conversation " * 300  # distinct first key, 3 keys of 256 tokens
        request = ChatRequest("chat", {}, "m", True, text, len(text) // 3, 16, f"r{i}")
        backend = BACKENDS[i % len(BACKENDS)]
        fleet[i % len(fleet)][0].dispatched(request, backend, request.prompt_tokens)
        sent.append((request, backend))
        await asyncio.sleep(1 / rate)
    return sent


def _exchanges(fleet: list[tuple[Affinity, FleetPrefix]]) -> int:
    return sum(share.exchanges for _, share in fleet)
