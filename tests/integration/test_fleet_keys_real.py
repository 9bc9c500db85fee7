"""API keys shared by a fleet, proved with real processes: with ``auth: {key_store:
redis}`` two ``llmroute serve`` replicas and the ``llmroute keys`` command share one key
store in a real redis-server (no SQLite file). A key made by the operator's command works
on both replicas; one made through one replica's admin API works on the other at once; a
key revoked on one replica is refused by the other within ``auth.cache_ttl_s``."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.fakes.fleet import ADMIN_KEY, create_key, fleet_config, replicas
from tests.fakes.upstream import serve_upstream

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
pytestmark = pytest.mark.slow
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


async def _status(client: httpx.AsyncClient, url: str, key: str) -> int:
    r = await client.post(url + "/v1/chat/completions", json=CHAT,
                          headers={"authorization": f"Bearer {key}"})
    return r.status_code


async def test_keys_made_and_revoked_anywhere_are_seen_everywhere(tmp_path, redis_server):
    async with serve_upstream(["ok"]) as up:
        config = fleet_config(tmp_path, redis_server.url, [{"id": "a", "base_url": up.base_url}],
                              auth={"key_store": "redis", "cache_ttl_s": 0.5})
        by_operator = create_key(config)
        async with replicas(config, 2) as (one, two), httpx.AsyncClient(timeout=30) as client:
            assert [await _status(client, r.url, by_operator) for r in (one, two)] == [200, 200]
            made = (await client.post(one.url + "/admin/keys", json={"tenant": "t"},
                                      headers=ADMIN)).json()
            assert await _status(client, two.url, made["key"]) == 200
            revoked = await client.delete(one.url + f"/admin/keys/{made['record']['id']}",
                                          headers=ADMIN)
            assert revoked.status_code == 200, revoked.text
            await asyncio.sleep(0.6)  # past two's cache entry
            assert await _status(client, two.url, made["key"]) == 401
    assert not (tmp_path / "keys.sqlite3").exists()
