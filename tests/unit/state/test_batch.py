"""Auto-pipelining of the Redis store's script calls on a real redis-server: concurrent
calls share round trips and stay exact, a script Redis has never seen is loaded and sent
again, an error in one reply reaches only its call, and a stalled Redis fails the batch
within the bound."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from llmroute.errors import StateUnavailable
from llmroute.state.batch import Batcher
from llmroute.state.protocol import Bucket, Charge
from llmroute.state.redis import RedisStore

pytestmark = [pytest.mark.slow, pytest.mark.redis]


async def test_concurrent_checks_share_round_trips_and_stay_exact(redis_server):
    store = RedisStore(redis_server.url, 2.0, prefix=f"t{uuid.uuid4().hex}:")
    rpm = Bucket("rpm:key:{acme}:k", 60, 3600.0)
    await store.ping()
    grants = await asyncio.gather(*(store.reserve([Charge(rpm, 1)]) for _ in range(200)))
    batches, calls = store.batcher.batches, store.batcher.calls
    await store.close()
    assert sum(g.allowed for g in grants) == 60
    assert [g.allowed for g in grants] == [True] * 60 + [False] * 140  # queue order kept
    assert calls == 200 and batches < 20


async def test_an_unloaded_script_is_loaded_and_one_bad_reply_fails_only_its_call(
        redis_server):
    client = aioredis.Redis.from_url(redis_server.url)
    fresh = client.register_script(f"return '{uuid.uuid4().hex}' .. ARGV[1]")
    broken = client.register_script("return redis.call('NO_SUCH_COMMAND')")
    batcher = Batcher(client, 2.0)
    out = await asyncio.gather(batcher.run(fresh, [], ["a"]), batcher.run(broken, [], []),
                               batcher.run(fresh, [], ["b"]), return_exceptions=True)
    await batcher.close()
    await client.aclose()
    assert out[0].endswith(b"a") and out[2].endswith(b"b")
    assert isinstance(out[1], ResponseError)


async def test_a_stalled_redis_fails_the_waiting_calls_within_the_bound(own_redis):
    store = RedisStore(own_redis.url, 0.1, prefix="t:")
    await store.ping()
    own_redis.pause()
    started = asyncio.get_running_loop().time()
    out = await asyncio.gather(*(store.reserve([Charge(Bucket("rpm:k", 5, 60.0), 1)])
                                 for _ in range(5)), return_exceptions=True)
    elapsed = asyncio.get_running_loop().time() - started
    own_redis.resume()
    await store.close()
    assert all(isinstance(x, StateUnavailable) for x in out)
    assert elapsed < 0.3


async def test_calls_sent_again_after_noscript_keep_their_order_across_reads(redis_server):
    client = aioredis.Redis.from_url(redis_server.url)
    counter = f"t{uuid.uuid4().hex}:n"
    fresh = client.register_script(f"-- {uuid.uuid4().hex}\nreturn redis.call('INCR', KEYS[1])")
    batcher = Batcher(client, 5.0, max_batch=3000)
    out = await asyncio.gather(*(batcher.run(fresh, [counter], []) for _ in range(3000)))
    later = await batcher.run(fresh, [counter], [])
    await batcher.close()
    await client.aclose()
    assert out == list(range(1, 3001)) and later == 3001  # ~300 kB of NOSCRIPT replies
