"""What one admitted request costs Redis: the commands the limiter sends (seen by
``MONITOR``, without those its Lua scripts run inside Redis) — one ``EVALSHA`` to admit
(charges and concurrency leases together), one to settle (reconcile and release
together), and none to settle when usage matches the reservation and no lease is held."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from llmroute.config.policy import LimitsConfig
from llmroute.errors import RateLimited
from llmroute.policy.auth import Caller
from llmroute.policy.keys import ApiKey, Limits, Tenant
from llmroute.policy.limits import Limiter
from llmroute.state.redis import RedisStore
from llmroute.types import ChatRequest

pytestmark = [pytest.mark.slow, pytest.mark.redis]

REQUEST = ChatRequest("chat", {}, "auto", False, "hi", 20, 80, "r1")  # reserves 100 tokens


def caller(key: Limits, tenant: Limits = Limits()) -> Caller:
    return Caller(ApiKey("key_1", "lr-abc", "acme", limits=key), Tenant("acme", tenant))


async def sent(url: str, action: Callable[[], Awaitable[object]]) -> list[str]:
    """The commands clients sent Redis while ``action`` ran (scripts' own excluded)."""
    watcher, ender = aioredis.Redis.from_url(url), aioredis.Redis.from_url(url)
    await ender.ping()  # connected before watching
    marker = f"end-{uuid.uuid4().hex}"
    seen: list[str] = []
    async with watcher.monitor() as monitor:
        await action()
        await ender.echo(marker)
        while marker not in (command := await monitor.next_command())["command"]:
            if command["client_type"] != "lua":
                seen.append(command["command"].split()[0].upper())
    await watcher.aclose()
    await ender.aclose()
    return seen


@pytest.fixture
async def limiter(redis_server):
    store = RedisStore(redis_server.url, 2.0, prefix=f"t{uuid.uuid4().hex}:")
    yield Limiter(store, LimitsConfig(), time.time)
    await store.close()


async def test_limits_and_leases_cost_one_command_in_and_one_out(redis_server, limiter):
    who = caller(Limits(rpm=100, tpm=100_000, max_concurrency=4),
                 Limits(tpm=1_000_000, daily_tokens=10**9, max_concurrency=50))
    await (await limiter.admit(who, REQUEST)).settle(90)  # warm: scripts loaded, connected
    tickets = []
    assert await sent(redis_server.url, lambda: one(limiter, who, tickets)) == ["EVALSHA"]
    assert await sent(redis_server.url, lambda: tickets[0].settle(100)) == ["EVALSHA"]
    assert await sent(redis_server.url, lambda: one(limiter, who, tickets)) == ["EVALSHA"]
    assert await sent(redis_server.url, lambda: tickets[1].settle(37)) == ["EVALSHA"]


async def test_usage_matching_the_reservation_without_a_lease_settles_for_free(
        redis_server, limiter):
    who = caller(Limits(rpm=100, tpm=100_000), Limits(tpm=1_000_000))
    await (await limiter.admit(who, REQUEST)).settle(90)
    tickets = []
    assert await sent(redis_server.url, lambda: one(limiter, who, tickets)) == ["EVALSHA"]
    assert await sent(redis_server.url, lambda: tickets[0].settle(100)) == []
    assert await sent(redis_server.url, lambda: one(limiter, who, tickets)) == ["EVALSHA"]
    assert await sent(redis_server.url, lambda: tickets[1].settle(12)) == ["EVALSHA"]


async def test_a_full_lease_refuses_in_the_one_admission_command(redis_server, limiter):
    who = caller(Limits(rpm=100, max_concurrency=1))
    held = await limiter.admit(who, REQUEST)

    async def refused() -> None:
        with pytest.raises(RateLimited, match="in flight"):
            await limiter.admit(who, REQUEST)

    assert await sent(redis_server.url, refused) == ["EVALSHA"]
    await held.settle(100)
    await (await limiter.admit(who, REQUEST)).settle(100)  # the lease was released


async def one(limiter: Limiter, who: Caller, tickets: list) -> None:
    tickets.append(await limiter.admit(who, REQUEST))
