"""The Redis state store on a real redis-server, on Redis's own clock: several store
instances (= replicas) never overshoot a bucket together, leases lapse by TTL, a Redis
restarted empty is fresh limits, and an unreachable or stalled Redis raises
StateUnavailable within the bound."""

from __future__ import annotations

import asyncio
import random
import time
import uuid

import pytest

from llmroute.errors import StateUnavailable
from llmroute.state.protocol import Bucket, Charge, Counter, Lease
from llmroute.state.redis import RedisStore

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def fleet(url: str, n: int, timeout_s: float = 2.0) -> list[RedisStore]:
    """``n`` stores sharing one fresh key prefix, as ``n`` replicas would."""
    prefix = f"t{uuid.uuid4().hex}:"
    return [RedisStore(url, timeout_s, prefix=prefix, pool_size=8) for _ in range(n)]


async def close_all(stores: list[RedisStore]) -> None:
    for store in stores:
        await store.close()


@pytest.mark.parametrize("seed", range(4))
async def test_replicas_together_never_overshoot_a_bucket(redis_server, seed):
    rng = random.Random(seed)
    stores = fleet(redis_server.url, rng.randint(2, 6))
    rpm = Bucket("rpm:key:{acme}:k1", 40, 3600.0)
    tpm = Bucket("tpm:key:{acme}:k1", 2000, 3600.0)
    costs = [rng.randint(1, 120) for _ in range(300)]
    grants = await asyncio.gather(*(
        rng.choice(stores).reserve([Charge(rpm, 1), Charge(tpm, cost)]) for cost in costs))
    await close_all(stores)
    admitted = [cost for cost, g in zip(costs, grants) if g.allowed]
    # an hour-long period: the refill during the test is far below one unit
    assert len(admitted) <= 40 and sum(admitted) <= 2000
    assert len(admitted) == 40 or sum(admitted) + min(costs) > 2000 - 1
    refused = [g for g in grants if not g.allowed]
    assert all(g.retry_after_s and g.retry_after_s > 0 for g in refused)


async def test_exactly_the_limit_is_admitted_across_replicas(redis_server):
    stores = fleet(redis_server.url, 8)
    rpm = Bucket("rpm:key:{acme}:hot", 60, 60.0)
    grants = await asyncio.gather(*(stores[i % 8].reserve([Charge(rpm, 1)])
                                    for i in range(400)))
    await close_all(stores)
    assert 60 <= sum(g.allowed for g in grants) <= 61  # ≤ 1 refilled while it ran


async def test_leases_lapse_by_ttl_on_redis_time(redis_server):
    a, b = fleet(redis_server.url, 2)
    first = await a.lease("conc:key:k", 1, 0.3)
    assert first is not None and await b.lease("conc:key:k", 1, 0.3) is None
    await asyncio.sleep(0.35)  # the replica holding it "died": nothing released it
    assert await b.lease("conc:key:k", 1, 0.3) is not None
    await close_all([a, b])


async def test_idle_state_carries_a_redis_ttl(redis_server):
    import redis.asyncio as aioredis
    (store,) = fleet(redis_server.url, 1)
    await store.reserve([Charge(Bucket("rpm:x", 10, 6.0), 5),
                         Charge(Counter("qd:x", 100, 30.0), 10)])
    await store.lease("conc:x", 2, 20.0)
    await store.close()
    client = aioredis.Redis.from_url(redis_server.url)
    prefix = store._prefix
    ttls = [await client.pttl(prefix + n) for n in ("rpm:x", "qd:x", "conc:x")]
    await client.aclose()
    assert 3000 < ttls[0] <= 4000  # 5 of 10 units at 10/6 per s: full in 3 s (+1 s)
    assert 29000 < ttls[1] <= 31000 and 19000 < ttls[2] <= 21000


async def test_a_redis_restarted_empty_is_fresh_limits(own_redis):
    (store,) = fleet(own_redis.url, 1, timeout_s=0.5)
    rpm = Bucket("rpm:key:{t}:k", 3, 60.0)
    assert [(await store.reserve([Charge(rpm, 1)])).allowed for _ in range(4)] == \
        [True, True, True, False]
    own_redis.kill()
    with pytest.raises(StateUnavailable):
        await store.reserve([Charge(rpm, 1)])
    own_redis.start()  # same port, empty dataset, no scripts loaded
    grants = [await store.reserve([Charge(rpm, 1)]) for _ in range(4)]
    await store.close()
    assert [g.allowed for g in grants] == [True, True, True, False]


async def test_a_dead_redis_raises_state_unavailable_within_the_bound(own_redis):
    (store,) = fleet(own_redis.url, 1, timeout_s=0.1)
    await store.ping()
    own_redis.kill()
    for call in (store.reserve([Charge(Bucket("rpm:k", 5, 60.0), 1)]),
                 store.lease("conc:k", 1, 5.0), store.release("conc:k", "x"), store.ping()):
        started = time.monotonic()
        with pytest.raises(StateUnavailable, match="did not answer within 100 ms"):
            await call
        assert time.monotonic() - started < 0.3
    await store.close()


async def test_a_stalled_redis_raises_within_the_bound_then_serves_again(own_redis):
    (store,) = fleet(own_redis.url, 1, timeout_s=0.1)
    rpm = Bucket("rpm:k", 5, 60.0)
    assert (await store.reserve([Charge(rpm, 1)])).allowed
    own_redis.pause()
    try:
        started = time.monotonic()
        with pytest.raises(StateUnavailable):
            await store.reserve([Charge(rpm, 1)])
        assert time.monotonic() - started < 0.3
    finally:
        own_redis.resume()
    grant = await store.reserve([Charge(rpm, 1)])
    await store.close()
    # the call that timed out was already sent: Redis may still run it once resumed
    assert grant.allowed and 2 - 0.1 < grant.levels[0].remaining < 3 + 0.1


async def test_a_wrong_password_is_state_unavailable_without_the_password(own_redis):
    import redis.asyncio as aioredis
    admin = aioredis.Redis.from_url(own_redis.url)
    await admin.config_set("requirepass", "the-right-one")
    await admin.aclose()
    store = RedisStore(own_redis.url.replace("redis://", "redis://:hunter2secret@"), 0.5)
    with pytest.raises(StateUnavailable) as caught:
        await store.ping()
    await store.close()
    assert "hunter2secret" not in caught.value.message
    assert "AuthenticationError" in caught.value.message


async def test_an_unresolvable_host_is_state_unavailable_within_the_bound():
    store = RedisStore("redis://no-such-host.invalid:6379/0", 0.2)
    started = time.monotonic()
    with pytest.raises(StateUnavailable):
        await store.reserve([Charge(Bucket("rpm:k", 5, 60.0), 1)])
    await store.close()
    assert time.monotonic() - started < 0.5


async def test_a_settlement_returns_once_queued_and_a_lost_one_is_counted(own_redis):
    (store,) = fleet(own_redis.url, 1, timeout_s=0.1)
    conc = Lease("conc:{t}:k", 1, 60.0)
    held = await store.admit([], [conc])
    own_redis.pause()
    try:
        started = time.monotonic()
        await store.settle([], [(conc.name, held.lease_ids[0])])
        assert time.monotonic() - started < 0.05  # no wait for the reply
        await asyncio.sleep(0.3)
    finally:
        own_redis.resume()
    assert store.lost == 1  # (Redis may still run it once resumed: it was sent)
    second = await store.admit([], [Lease("conc:{t}:j", 1, 60.0)])
    await store.settle([], [("conc:{t}:j", second.lease_ids[0])])
    assert (await store.admit([], [Lease("conc:{t}:j", 1, 60.0)])).allowed  # in order
    await store.close()
