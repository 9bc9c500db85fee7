"""The ``state:`` section: Redis URLs checked at load time with errors that name the
field and never quote a password; the store it builds."""

from __future__ import annotations

import pytest

from llmroute.assemble.policy import build_store
from llmroute.config import parse_config
from llmroute.errors import ConfigError
from llmroute.state.guard import Guarded
from llmroute.state.memory import MemoryStore
from llmroute.state.redis import RedisStore

BASE = """\
pools: {general: {}}
backends: [{id: a, pool: general, engine: vllm, base_url: "http://127.0.0.1:8001"}]
routing: {default_pool: general}
"""


def config(state: str):
    return parse_config(BASE + state, "cfg.yaml")


@pytest.mark.parametrize(("url", "says"), [
    ("http://cache:6379", "scheme 'http' is not one of redis, rediss, unix"),
    ("cache:6379", "is not one of redis, rediss, unix"),
    ("redis://:s3cret-pw@cache:99999/0", "not a Redis URL"),
    ("redis://:s3cret-pw@:6379/0", "needs a host"),
    ("redis://cache:6379/zero", "database must be a number"),
    ("unix://", "needs a socket path"),
])
def test_a_bad_redis_url_is_a_config_error_naming_the_field(url, says):
    with pytest.raises(ConfigError) as info:
        config(f'state: {{kind: redis, url: "{url}"}}\n')
    assert "state.url" in str(info.value) and says in str(info.value)
    assert "s3cret-pw" not in str(info.value)


def test_redis_needs_a_url_and_the_prefix_no_hash_tag():
    with pytest.raises(ConfigError, match="needs state.url"):
        config("state: {kind: redis}\n")
    with pytest.raises(ConfigError, match="state.prefix"):
        config('state: {kind: redis, url: "redis://h", prefix: "{x}:"}\n')


@pytest.mark.parametrize("url", ["redis://h", "redis://:pw@h:6380/2", "rediss://u:pw@h:1/0",
                                 "unix:///run/redis.sock", "redis://[::1]:6379"])
def test_good_redis_urls_load(url):
    assert config(f'state: {{kind: redis, url: "{url}"}}\n').state.url == url


async def test_the_store_follows_the_kind():
    assert isinstance(build_store(config("")), MemoryStore)
    store = build_store(config('state: {kind: redis, url: "redis://h", fail_closed: true}\n'
                               "limits: {state_timeout_s: 0.005}\n"))
    assert isinstance(store, Guarded) and isinstance(store.inner, RedisStore)
    assert store.inner._timeout == 0.005
    await store.close()
