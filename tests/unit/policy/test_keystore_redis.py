"""The Redis key store keeps the SQLite store's contract (same records back, digests only,
duplicates refused, revocation once), and two replicas' stores on one Redis see each
other's keys: a key created on one authenticates on the other; a revocation on one is seen
by the other once its cache entry expires (``auth.cache_ttl_s``)."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis
from fakes.clock import FakeClock

from llmroute.config.policy import AuthConfig, StateConfig
from llmroute.errors import AuthenticationFailed, ConfigError, StateUnavailable
from llmroute.policy.auth import Authenticator
from llmroute.policy.issue import issue_key
from llmroute.policy.keys import ApiKey, Limits, Tenant
from llmroute.policy.keystore import KeyStore
from llmroute.policy.keystore_redis import KeyStoreConflict, RedisKeyStore, open_key_store

pytestmark = [pytest.mark.slow, pytest.mark.redis]


@pytest.fixture
def prefix() -> str:
    return f"k{time.time_ns()}:"


async def _fill(store) -> tuple[str, ApiKey]:
    await store.put_tenant(Tenant("t", Limits(rpm=5), {"team": "x"}, 1.5))
    await store.put_tenant(Tenant("a"))
    secret, key = await issue_key(store, "t", 1764667000.123456, name="n",
                                  limits=Limits(rpm=60), models=("m",))
    await issue_key(store, "a", 1764667001.0)
    return secret, key


async def test_same_records_as_sqlite(redis_server, prefix, tmp_path):
    sqlite, redis = KeyStore(str(tmp_path / "k.db")), RedisKeyStore(redis_server.url, 1.0,
                                                                    prefix=prefix)
    for store in (sqlite, redis):
        secret, key = await _fill(store)
        assert await store.key(key.id) == key
        assert await store.revoke(key.id, 7.25) is True
        assert await store.revoke(key.id, 8.0) is False
        assert await store.revoke("nope", 8.0) is False
    assert await redis.tenants() == await sqlite.tenants()
    assert [k.tenant for k in await redis.keys()] == ["t", "a"]
    assert [k.revoked_at for k in await redis.keys("t")] == [7.25]
    client = aioredis.Redis.from_url(redis_server.url)
    stored = [v for name in await client.keys(prefix + "*") for v in
              (await client.hgetall(name)).items()]
    await client.aclose()
    assert stored and not any(secret.encode() in k + v for k, v in stored)  # digests only
    sqlite.close()


async def test_duplicates_are_refused(redis_server, prefix):
    store = RedisKeyStore(redis_server.url, 1.0, prefix=prefix)
    _, key = await _fill(store)
    found = await store.find((await store.keys("t"))[0].id)
    assert found is None  # an id is not a digest
    digest = (await store._row(key.id))[6]
    with pytest.raises(KeyStoreConflict):
        await store.add_key(key, "other-digest")
    with pytest.raises(KeyStoreConflict):
        await store.add_key(ApiKey("new-id", "lr-x", "t"), digest)


async def test_created_on_one_replica_seen_on_another(redis_server, prefix):
    one, two = (RedisKeyStore(redis_server.url, 1.0, prefix=prefix) for _ in range(2))
    await one.put_tenant(Tenant("t"))
    clock = FakeClock()
    auth_two = Authenticator(two, 5.0, 100, clock, lambda: 100.0)
    secret, key = await issue_key(one, "t", 0.0)
    assert (await auth_two.authenticate(f"Bearer {secret}", None)).key.id == key.id
    await one.revoke(key.id, 50.0)
    await auth_two.authenticate(f"Bearer {secret}", None)  # cached for cache_ttl_s
    clock.advance(5.0)
    with pytest.raises(AuthenticationFailed):
        await auth_two.authenticate(f"Bearer {secret}", None)


async def test_redis_down_is_state_unavailable_and_config_is_checked(own_redis, prefix):
    store = RedisKeyStore(own_redis.url, 0.2, prefix=prefix)
    own_redis.kill()
    with pytest.raises(StateUnavailable):
        await store.find("d")
    with pytest.raises(ConfigError, match="key_store: redis needs state"):
        open_key_store(AuthConfig(key_store="redis"), StateConfig(), 0.2)
    assert isinstance(open_key_store(AuthConfig(), StateConfig(), 0.2), KeyStore)
