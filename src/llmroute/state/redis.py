"""The Redis state store: the ``StateStore`` contract shared by every replica of a fleet.

Each ``admit`` (also ``reserve`` and ``lease``) and ``settle`` (also ``adjust``) is one
Lua script (``state/lua.py``) run by EVALSHA, and the calls a replica makes while one
round trip is under way share the next (``state/batch.py``: one write on the store's one
connection, each call still its own script; the scripts are loaded on every new
connection, and a NOSCRIPT loads the script and sends the call again); ``release`` is one
``ZREM`` and ``ping`` one ``PING``, batched too. Script runs are atomic in Redis, so replicas
never race on a read-modify-write. The clock is Redis's ``TIME`` (one clock for the fleet)
unless a ``clock`` is injected (tests). Keys are ``<prefix><name>``: a name that carries a
Redis hash tag (``rpm:key:{tenant}:id``) keeps every name of a call in one slot, as Redis
Cluster needs. Every call is bounded by ``timeout_s`` and raises StateUnavailable past it
or when Redis cannot be reached; the connections reconnect on the next call. A call that
timed out after it was sent may still take effect in Redis (a reservation then counts
without its request: the error is on the safe side). ``settle`` and ``adjust`` do not wait
for Redis's reply (nothing in it is needed, and Redis runs them before any later call of
this store): they return once queued, never raise, and a failed one is counted in
``lost`` — its state lapses by TTL, as when the guard drops a settlement.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from llmroute.errors import StateUnavailable
from llmroute.state import lua
from llmroute.state.batch import Batcher
from llmroute.state.protocol import Bucket, Charges, Counter, Grant, Lease


class RedisStore:
    """``StateStore`` in the Redis at ``url`` (``redis://``, ``rediss://`` or ``unix://``),
    keys under ``prefix``; one connection (the batcher's; ``pool_size`` bounds redis-py's
    pool, which supplies its settings); every call answers within
    ``timeout_s`` seconds or raises StateUnavailable. ``clock`` (seconds) replaces Redis's
    ``TIME`` when given. No I/O until the first call."""

    queues_settlements = True  # settle and adjust return once queued

    def __init__(self, url: str, timeout_s: float, *, prefix: str = "llmroute:",
                 pool_size: int = 64, clock: Callable[[], float] | None = None):
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=pool_size, timeout=timeout_s, socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 1))
        self._redis = aioredis.Redis(connection_pool=pool)
        self._timeout, self._prefix, self._clock = timeout_s, prefix, clock
        self._admit = self._redis.register_script(lua.ADMIT)
        self._settle = self._redis.register_script(lua.SETTLE)
        self.batcher = Batcher(self._redis, timeout_s, scripts=(self._admit, self._settle))
        self._ids = itertools.count()
        self._stem = secrets.token_hex(8) + "-"

    async def reserve(self, charges: Charges) -> Grant:
        """See ``StateStore.reserve``."""
        return await self.admit(charges, ())

    async def adjust(self, charges: Charges) -> None:
        """See ``StateStore.adjust``."""
        await self.settle(charges, ())

    async def lease(self, name: str, limit: int, ttl_s: float) -> str | None:
        """See ``StateStore.lease``; the id as ``admit``'s."""
        grant = await self.admit((), (Lease(name, limit, ttl_s),))
        return grant.lease_ids[0] if grant.allowed else None

    async def admit(self, charges: Charges, leases: Sequence[Lease]) -> Grant:
        """See ``StateStore.admit``: one EVALSHA (batched); a lease id is this store's 64
        random bits and a count (unique across replicas)."""
        if not charges and not leases:
            return Grant(True, ())
        ids = tuple([f"{self._stem}{next(self._ids):x}" for _ in leases])
        args = [self._now(), *_args(charges)]
        for lease, lease_id in zip(leases, ids):
            args += ("l", lease_id, int(lease.limit), float(lease.ttl_s))
        reply = self.batcher.run(self._admit, self._keys(charges, [x.name for x in leases]),
                                 args)
        try:  # (inline, not ``_call``: one frame less to resume on the request path)
            out = await reply
        except (RedisError, OSError, TimeoutError) as exc:
            raise unavailable(exc, self._timeout, "the Redis state store") from exc
        denied, retry = int(out[0]), out[1]
        levels = tuple([float(x) for x in out[2:]])
        if denied == 0:
            return Grant(True, levels, lease_ids=ids)
        if denied > len(charges):
            return Grant(False, levels, full=denied - 1 - len(charges))
        return Grant(False, levels, denied - 1, float(retry) if retry else None)

    async def settle(self, charges: Charges, held: Sequence[tuple[str, str]]) -> None:
        """See ``StateStore.settle``: one EVALSHA (batched; nothing when there is nothing
        to do), queued without waiting for its reply: Redis runs it before any later call
        of this store; a failed one is counted in ``lost`` (its state lapses by TTL)."""
        if charges or held:
            args = [self._now(), *_args(charges)]
            for _, lease_id in held:
                args += ("l", lease_id, "", "")
            self.batcher.post(self._settle, self._keys(charges, [n for n, _ in held]), args)

    @property
    def lost(self) -> int:
        """Settlements Redis did not take (it failed or could not be reached)."""
        return self.batcher.lost

    async def release(self, name: str, lease_id: str) -> None:
        """See ``StateStore.release``: one ZREM (batched)."""
        await self._call(self.batcher.command("ZREM", self._prefix + name, lease_id))

    async def ping(self) -> None:
        """Raises StateUnavailable unless Redis answers within the bound (one PING,
        batched: the batcher's connection is made by the first)."""
        await self._call(self.batcher.command("PING"))

    async def close(self) -> None:
        """Stop the batches and close the pooled connections."""
        await self.batcher.close()
        await self._redis.aclose()

    def _keys(self, charges: Charges, leases: Iterable[str]) -> list[str]:
        prefix = self._prefix
        return [prefix + limit.name for limit, _ in charges] + [prefix + n for n in leases]

    def _now(self) -> str:
        return "" if self._clock is None else repr(float(self._clock()))

    async def _call(self, reply: asyncio.Future[Any]) -> Any:
        """The batched call's ``reply``; the batcher bounds the wait by ``timeout_s``."""
        try:
            return await reply
        except (RedisError, OSError, TimeoutError) as exc:
            raise unavailable(exc, self._timeout, "the Redis state store") from exc


async def bounded(call: Awaitable[Any], timeout_s: float, what: str) -> Any:
    """``call``'s result; raises StateUnavailable naming ``what`` when Redis does not answer
    within ``timeout_s`` seconds or cannot be reached."""
    try:
        async with asyncio.timeout(timeout_s):
            return await call
    except (RedisError, OSError, TimeoutError) as exc:
        raise unavailable(exc, timeout_s, what) from exc


def unavailable(exc: BaseException, timeout_s: float, what: str) -> StateUnavailable:
    """The StateUnavailable for ``exc`` from a call to ``what`` bounded by ``timeout_s``."""
    return StateUnavailable(f"{what} did not answer within {timeout_s * 1000:g} ms: "
                            f"{type(exc).__name__}: {_redact(str(exc))}")


def _args(charges: Charges) -> list[str | float]:
    """Four ARGV per charge: kind, cost, capacity or limit, period or TTL (floats: hiredis
    writes them as ``repr`` does, exactly)."""
    out: list[str | float] = []
    for limit, cost in charges:
        if isinstance(limit, Bucket):
            out += ("b", float(cost), float(limit.capacity), float(limit.period_s))
        else:
            assert isinstance(limit, Counter)
            out += ("c", float(cost), float(limit.limit), float(limit.ttl_s))
    return out


def _redact(message: str) -> str:
    """Redis error texts never carry the password, but a URL in one would: keep it out."""
    return message.split("@")[-1] if "://" in message else message
