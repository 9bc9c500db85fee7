"""The fleet's router-side load: every replica's in-flight requests and pending prefill
tokens per backend, shared through Redis off the request path.

Every ``interval_s`` seconds (default 0.05) a ``FleetLoad`` (one per served backend set of
a replica, its own random id) makes one round trip to Redis (a pipeline): ``HSET
<prefix>load <id> "<seq> <json>"`` with its own counts (``{backend_id: [in_flight,
prefill_tokens]}``, ``seq`` counting up every write), ``PEXPIRE`` of the hash (``ttl_s``:
a fleet that stopped leaves nothing behind) and ``HGETALL``. Another replica's field counts
while its ``seq`` keeps changing; one unchanged for ``stale_s`` seconds belongs to a
replica that died and is deleted (``HDEL``, by whichever replica notices). The live others'
counts, summed per backend, go to the stats' ``set_remote`` (``RouterStats``: added into
the published ``BackendStats`` at the next snapshot), so the anchor's in-flight and
queue scorers see the fleet's load. No request waits on Redis: they only read the last
reading.

Redis out of reach (or slower than ``timeout_s``): the remote counts are cleared (the
replica routes on its own counts), logged once per change of state and counted in
``outages``; the next interval tries again. ``follow(False)`` stops reading (a draining
backend set after a reload counts only its own requests) but keeps publishing; closing
deletes this replica's field.

The same exchange shares other per-backend sums: quality ejection's answer tallies
(``fuse/quality.py``) go under the hash ``<prefix>quality`` (``key="quality"``,
``add=add_tallies``: each replica's tally lists summed field by field), once per healing
tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from llmroute.state.guard import repeat, stop_if_cancelled

Load = dict[str, tuple[int, int]]
"""``{backend_id: (in_flight, prefill_tokens)}``."""
Adder = Callable[[dict[str, Any], str], None]
"""``add(total, body)``: sum one replica's JSON ``body`` into ``total`` per backend."""


class LoadStats(Protocol):
    """What this module needs of ``anchor.stats.router.RouterStats`` (or of any other
    per-backend sums it shares: ``fuse.quality.QualityTracker``)."""

    def local_load(self) -> Mapping[str, Any]:
        """This process's own counts."""
        ...

    def set_remote(self, load: Mapping[str, Any]) -> None:
        """The other replicas' summed counts."""
        ...


class FleetLoad:
    """Shares ``stats``' counts through ``redis`` (hash ``<prefix><key>``) and feeds the
    others' back into it, as the module says, each replica's summed by ``add``; ``clock``
    is monotonic seconds. Nothing runs until ``run``."""

    def __init__(self, stats: LoadStats, redis: aioredis.Redis, clock: Callable[[], float],
                 *, prefix: str = "llmroute:", interval_s: float = 0.05,
                 stale_s: float = 1.0, ttl_s: float = 2.0, timeout_s: float = 0.25,
                 key: str = "load", add: Adder | None = None):
        self._stats, self._redis, self._clock = stats, redis, clock
        self._key, self._interval, self._stale = prefix + key, interval_s, stale_s
        self._add = add or _add
        self._ttl_ms, self._timeout = int(ttl_s * 1000), timeout_s
        self.replica = secrets.token_hex(6)
        self._seq = 0
        self._seen: dict[str, tuple[str, float]] = {}  # field -> (seq, when it last changed)
        self.following, self.up, self.outages = True, True, 0
        self._log = structlog.get_logger("llmroute.fleet")

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Share every ``interval_s`` while the block runs; then stop and delete this
        replica's field (best effort)."""
        task = asyncio.create_task(repeat(self.exchange, self._interval))
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                async with asyncio.timeout(self._timeout):
                    await self._redis.hdel(self._key, self.replica)

    def follow(self, on: bool) -> None:
        """Add the others' counts (True, the default) or not (False: cleared now)."""
        self.following = on
        if not on:
            self._stats.set_remote({})

    async def exchange(self) -> None:
        """One round trip: write this replica's counts, read the others'."""
        self._seq += 1
        value = f"{self._seq} {json.dumps(self._stats.local_load(), separators=(',', ':'))}"
        try:
            async with asyncio.timeout(self._timeout):
                pipe = self._redis.pipeline(transaction=False)
                pipe.hset(self._key, self.replica, value)
                pipe.pexpire(self._key, self._ttl_ms)
                pipe.hgetall(self._key)
                fields = (await pipe.execute())[2]
                dead = self._read(fields)
                if dead:
                    await self._redis.hdel(self._key, *dead)
        except (RedisError, OSError, TimeoutError) as exc:
            stop_if_cancelled(exc)
            self._went_down(exc)
            return
        if not self.up:
            self.up = True
            self._log.info("fleet_load_available")

    def _read(self, fields: Mapping[bytes, bytes]) -> list[str]:
        """Sum the live others' counts into the stats; the dead replicas' fields."""
        now, dead = self._clock(), []
        total: dict[str, Any] = {}
        for raw_id, raw in fields.items():
            replica = raw_id.decode(errors="replace")
            seq, _, body = raw.decode(errors="replace").partition(" ")
            if replica == self.replica:
                continue
            last = self._seen.get(replica)
            if last is None or last[0] != seq:
                self._seen[replica] = (seq, now)
            elif now - last[1] > self._stale:
                dead.append(replica)
                continue
            self._add(total, body)
        for replica in dead:
            del self._seen[replica]
        if self.following:
            self._stats.set_remote(total)
        return dead

    def _went_down(self, exc: BaseException) -> None:
        self._stats.set_remote({})
        if self.up:
            self.up = False
            self.outages += 1
            self._log.warning("fleet_load_unavailable", error=type(exc).__name__,
                              routing="on this replica's own counts")


def add_tallies(total: dict[str, Any], body: str) -> None:
    """Add one replica's ``{backend_id: [tally fields…]}`` into ``total`` field by field
    (a malformed body, or a non-finite or negative number in it, adds nothing)."""
    try:
        tallies = {str(b): [float(x) for x in v] for b, v in json.loads(body).items()}
    except (ValueError, TypeError, AttributeError):
        return
    if any(not math.isfinite(x) or x < 0 for v in tallies.values() for x in v):
        return
    for b, values in tallies.items():
        old = total.get(b)
        total[b] = values if old is None else [x + y for x, y in zip(old, values)]


def _add(total: dict[str, Any], body: str) -> None:
    """Add one replica's ``{backend_id: [in_flight, prefill_tokens]}`` into ``total``
    (a malformed body adds nothing)."""
    try:
        counts = json.loads(body)
        items = [(str(b), int(v[0]), int(v[1])) for b, v in counts.items()]
    except (ValueError, TypeError, AttributeError, IndexError, KeyError):
        return
    for b, in_flight, prefill in items:
        old = total.get(b, (0, 0))
        total[b] = (old[0] + max(in_flight, 0), old[1] + max(prefill, 0))
