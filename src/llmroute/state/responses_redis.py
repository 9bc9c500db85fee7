"""The Redis ``ResponseStore`` (``state.kind: redis``): stored Responses every replica reads,
so a follow-up with ``previous_response_id`` may land on any replica.

Layout, under the state's prefix and the hash tag ``{r}`` (one Redis Cluster slot, as the
scripts name their keys): ``responses:{r}:<id>`` a hash (``owner``, ``record``) expiring
after ``ttl_s`` (Redis's own TTL), and ``responses:{r}:index`` a sorted set of ids by time
stored. A put is one Lua script (atomic across replicas): the hash, its TTL, the index entry,
then the index trimmed — the expired entries, and the oldest past ``max_entries`` with their
hashes. A delete is one script that deletes only the owner's record. Every call answers
within ``timeout_s`` seconds or raises StateUnavailable (``state/redis.bounded``).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from llmroute.state.redis import bounded

PUT = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'record', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], t, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', t - tonumber(ARGV[3]) / 1000)
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if over > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, over - 1)
  for _, id in ipairs(old) do redis.call('DEL', ARGV[6] .. id) end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
return 1
"""
"""KEYS: the record's hash, the index; ARGV: owner, record, TTL ms, id, max entries, the
hashes' key prefix."""

DELETE = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
"""
"""KEYS: the record's hash, the index; ARGV: owner, id. 1 when deleted."""

_WHAT = "the Redis response store"


class RedisResponses:
    """``ResponseStore`` in the Redis at ``url`` under ``prefix`` (module docstring). No
    I/O until the first call."""

    def __init__(self, url: str, timeout_s: float, ttl_s: float, max_entries: int, *,
                 prefix: str = "llmroute:"):
        self._redis = aioredis.Redis.from_url(url, socket_timeout=timeout_s,
                                              socket_connect_timeout=timeout_s)
        self._timeout, self._ttl_ms, self._max = timeout_s, int(ttl_s * 1000), max_entries
        self._base = prefix + "responses:{r}:"
        self._index = self._base + "index"
        self._put = self._redis.register_script(PUT)
        self._delete = self._redis.register_script(DELETE)

    async def put(self, response_id: str, owner: str, record: bytes) -> None:
        """See ``ResponseStore.put``: one script."""
        await bounded(self._put(keys=[self._base + response_id, self._index], args=[
            owner, record, self._ttl_ms, response_id, self._max, self._base]),
            self._timeout, _WHAT)

    async def get(self, response_id: str) -> tuple[str, bytes] | None:
        """See ``ResponseStore.get``: one HMGET."""
        owner, record = await bounded(self._redis.hmget(
            self._base + response_id, "owner", "record"), self._timeout, _WHAT)
        if owner is None or record is None:
            return None
        return owner.decode(), bytes(record)

    async def delete(self, response_id: str, owner: str) -> bool:
        """See ``ResponseStore.delete``: one script."""
        return bool(await bounded(self._delete(keys=[self._base + response_id, self._index],
                                               args=[owner, response_id]),
                                  self._timeout, _WHAT))

    async def close(self) -> None:
        """Close the connections."""
        await self._redis.aclose()
