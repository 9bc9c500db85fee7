"""The answer cache's parts: ``build_cache`` (the cache over the gate's encoder) and
``share_cache`` (the replicas' exchange through Redis, ``state/answers.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from llmroute.cache.answers import AnswerCache
from llmroute.config import Config
from llmroute.gate.protocol import Gate

if TYPE_CHECKING:  # redis-py is imported only when the cache is shared
    from llmroute.state.answers import FleetAnswers


def build_cache(config: Config, gate: Gate, clock: Callable[[], float],
                registry: CollectorRegistry) -> AnswerCache | None:
    """The answer cache of ``config.cache`` (None when not enabled), embedding through
    ``gate`` when a verdict carries no vector; ``clock`` gives epoch seconds. No I/O."""
    if not config.cache.enabled:
        return None
    return AnswerCache(config.cache, gate.embed, clock, registry)


async def share_cache(stack: contextlib.AsyncExitStack, config: Config,
                      cache: AnswerCache | None) -> FleetAnswers | None:
    """With the cache on, ``cache.share`` and ``state: {kind: redis}``: exchange entries and
    purges with the other replicas until ``stack`` closes."""
    state = config.state
    if cache is None or not cache.cfg.share or state.kind != "redis" or state.url is None:
        return None
    import redis.asyncio as aioredis

    from llmroute.state.answers import FleetAnswers

    bound = config.limits.state_timeout_s
    redis = aioredis.Redis.from_url(state.url, socket_connect_timeout=bound,
                                    socket_timeout=bound)
    stack.push_async_callback(redis.aclose)
    cache.sharing = True
    fleet = FleetAnswers(cache.take_events, cache.apply_event, redis, prefix=state.prefix,
                         interval_s=cache.cfg.share_interval_s, keep=cache.cfg.share_keep,
                         timeout_s=bound)
    await stack.enter_async_context(fleet.run())
    return fleet
