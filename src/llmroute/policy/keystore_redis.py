"""The Redis key store: the ``KeyStore`` contract in the Redis every replica shares
(``auth: {key_store: redis}`` with ``state: {kind: redis}``), so a key created or revoked
on one replica (or by ``llmroute keys``) is seen by every other one — at once for a key not
yet looked up, within ``auth.cache_ttl_s`` for one a replica has cached.

Keys are held only as their SHA-256 digests, as in SQLite. Layout, under the state's
prefix ``keystore:{k}:`` (one hash slot): hashes ``tenants`` (tenant id → JSON
``tenant_row``), ``keys`` (key id → JSON ``key_row``, digest last), ``digests`` (digest →
key id) and ``revoked`` (key id → epoch seconds). Adding a key and revoking one are single
Lua scripts (atomic across replicas). Every call answers within ``timeout_s`` seconds or raises StateUnavailable (a
key lookup then answers 503, as when the SQLite file cannot be read); a duplicate id or
digest raises KeyStoreConflict.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis.asyncio as aioredis

from llmroute.config.policy import AuthConfig, StateConfig
from llmroute.errors import ConfigError
from llmroute.policy.keys import ApiKey, Tenant
from llmroute.policy.keystore import (KeyStore, key_from_row, key_row, tenant_from_row,
                                      tenant_row)
from llmroute.state.redis import bounded

ADD = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 or redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1
then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return 1
"""
"""KEYS: keys hash, digests hash; ARGV: key id, digest, row JSON. 1 when added."""

REVOKE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
return redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2])
"""
"""KEYS: keys hash, revoked hash; ARGV: key id, epoch seconds. 1 when revoked now."""


class KeyStoreConflict(Exception):
    """A key with this id or digest already exists."""


class RedisKeyStore:
    """Tenants and keys in the Redis at ``url`` under ``prefix`` (module docstring). No
    I/O until the first call."""

    def __init__(self, url: str, timeout_s: float, *, prefix: str = "llmroute:"):
        self._redis = aioredis.Redis.from_url(url, socket_timeout=timeout_s,
                                              socket_connect_timeout=timeout_s)
        self._timeout = timeout_s
        base = prefix + "keystore:{k}:"  # one hash slot for all three
        self._tenants, self._keys = base + "tenants", base + "keys"
        self._digests, self._revoked = base + "digests", base + "revoked"
        self._add = self._redis.register_script(ADD)
        self._revoke = self._redis.register_script(REVOKE)

    async def put_tenant(self, tenant: Tenant) -> None:
        """Create or replace ``tenant``."""
        await self._bounded(self._redis.hset(self._tenants, tenant.id,
                                             json.dumps(tenant_row(tenant))))

    async def tenant(self, tenant_id: str) -> Tenant | None:
        """The tenant ``tenant_id``, or None."""
        raw = await self._bounded(self._redis.hget(self._tenants, tenant_id))
        return None if raw is None else tenant_from_row(json.loads(raw))

    async def tenants(self) -> list[Tenant]:
        """Every tenant, by id."""
        rows = await self._bounded(self._redis.hvals(self._tenants))
        return sorted((tenant_from_row(json.loads(r)) for r in rows), key=lambda t: t.id)

    async def add_key(self, key: ApiKey, key_digest: str) -> None:
        """Store a new key's record under its digest; raises KeyStoreConflict for a
        duplicate id or digest."""
        added = await self._bounded(self._add(
            keys=[self._keys, self._digests],
            args=[key.id, key_digest, json.dumps(key_row(key, key_digest))]))
        if not int(added):
            raise KeyStoreConflict(f"a key with id {key.id} or this secret already exists")

    async def find(self, key_digest: str) -> tuple[ApiKey, str] | None:
        """The key whose digest is ``key_digest`` and the digest as stored, or None."""
        key_id = await self._bounded(self._redis.hget(self._digests, key_digest))
        row = None if key_id is None else await self._row(key_id.decode())
        return None if row is None else (key_from_row(row), row[6])

    async def key(self, key_id: str) -> ApiKey | None:
        """The key ``key_id``, or None."""
        row = await self._row(key_id)
        return None if row is None else key_from_row(row)

    async def keys(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key (of ``tenant`` when given), oldest first."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.hvals(self._keys)
        pipe.hgetall(self._revoked)
        raw, revoked = await self._bounded(pipe.execute())
        rows = [_revoked(json.loads(r), revoked) for r in raw]
        rows.sort(key=lambda r: (r[4], r[0]))
        return [key_from_row(r) for r in rows if not tenant or r[2] == tenant]

    async def revoke(self, key_id: str, at: float) -> bool:
        """Mark key ``key_id`` revoked at epoch ``at``; False when there is no such key or
        it already was."""
        return bool(int(await self._bounded(self._revoke(
            keys=[self._keys, self._revoked], args=[key_id, repr(float(at))]))))

    def close(self) -> None:
        """Close the connections (scheduled on the running loop; none outside one)."""
        try:
            asyncio.get_running_loop().create_task(self._redis.aclose())
        except RuntimeError:
            pass

    async def _row(self, key_id: str) -> list[Any] | None:
        pipe = self._redis.pipeline(transaction=False)
        pipe.hget(self._keys, key_id)
        pipe.hget(self._revoked, key_id)
        raw, at = await self._bounded(pipe.execute())
        return None if raw is None else _revoked(json.loads(raw), {key_id.encode(): at})

    async def _bounded(self, call: Any) -> Any:
        return await bounded(call, self._timeout, "the Redis key store")


def _revoked(row: list[Any], revoked: dict[bytes, bytes | None]) -> list[Any]:
    """``row`` with its revocation time from ``revoked`` (key id → epoch), when any."""
    at = revoked.get(row[0].encode())
    if at is not None:
        row[3] = float(at)
    return row


AnyKeyStore = KeyStore | RedisKeyStore
"""Either key store (they share one contract)."""


def open_key_store(auth: AuthConfig, state: StateConfig, timeout_s: float) -> AnyKeyStore:
    """``auth.key_store``'s store: SQLite at ``auth.keys_path``, or Redis at ``state.url``
    (each call bounded by ``timeout_s``). No I/O. Raises ConfigError for ``key_store:
    redis`` without ``state: {kind: redis}``."""
    if auth.key_store == "sqlite":
        return KeyStore(auth.keys_path)
    if state.kind != "redis" or state.url is None:
        raise ConfigError("auth.key_store: redis needs state: {kind: redis, url: ...} (the "
                          "keys live in the replicas' shared Redis)")
    return RedisKeyStore(state.url, timeout_s, prefix=state.prefix)
