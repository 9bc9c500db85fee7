"""Circuit breakers shared by a fleet of replicas through Redis, off the request path.

Each replica keeps its own ``CircuitBreaker`` (``fuse/breaker.py``) and every request reads
only that local copy: no request waits on Redis. ``FleetBreakers`` runs two background
tasks beside it:

* sync: a local open or close (the breaker's ``on_transition`` puts it on a queue, no I/O)
  is published on the Redis channel ``<prefix>breakers`` as ``open|close <backend>
  <replica>``; every other replica's subscriber adopts it (an open starts a full cool-down
  there too). Propagation is one PUBLISH: milliseconds on a LAN.
* probes: every ``poll_s`` seconds, for each backend half-open here, the replica tries to
  take the fleet's one probe lease ``breaker-probe:{<backend>}`` (a state-store lease,
  ``probe_ttl_s`` long); the holder sends the configured half-open probes, the others send
  none (``grant_probes``), so the fleet probes a recovering engine as one replica would.
  The lease is released once the backend leaves half-open here.

A replica that loses Redis keeps its local breakers: the subscriber reconnects every
``poll_s``, transitions made meanwhile are not replayed (each replica's own threshold still
guards it), and the guarded store grants the probe lease unmetered (fail open), so a
replica alone probes on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from llmroute.state.guard import stop_if_cancelled
from llmroute.state.protocol import StateStore
from llmroute.types import BreakerState, BreakerView

PROBE_TTL_S = 10.0
"""Seconds a probe lease lives: a replica that died holding one frees it this late."""


class LocalBreakers(Protocol):
    """What this module needs of ``fuse.breaker.CircuitBreaker``."""

    on_transition: Callable[[str, bool], None] | None

    def views(self) -> Mapping[str, BreakerView]:
        """``{backend_id: BreakerView}``; absent: closed."""
        ...

    def adopt(self, backend_id: str, opened: bool, now: float) -> None:
        """Apply another replica's open (True) or close."""
        ...

    def grant_probes(self, backend_id: str, granted: bool) -> None:
        """Whether this replica may send the half-open probes."""
        ...


class FleetBreakers:
    """Shares ``breaker``'s transitions through the Redis at ``url`` (channel
    ``<prefix>breakers``) and bounds half-open probes with leases from ``store``; ``clock``
    is the breaker's (monotonic s). Nothing runs until ``run``."""

    def __init__(self, breaker: LocalBreakers, url: str, store: StateStore, clock:
                 Callable[[], float], *, prefix: str = "llmroute:", poll_s: float = 0.05,
                 probe_ttl_s: float = PROBE_TTL_S):
        self._breaker, self._url, self._store, self._clock = breaker, url, store, clock
        self._channel, self._poll_s, self._ttl = prefix + "breakers", poll_s, probe_ttl_s
        self.replica = secrets.token_hex(6)
        self._outbox: asyncio.Queue[tuple[str, bool]] = asyncio.Queue()
        self._leases: dict[str, str] = {}
        self._round = asyncio.Lock()  # one probe round at a time
        self.published = self.adopted = 0
        self._log = structlog.get_logger("llmroute.fleet")
        breaker.on_transition = lambda backend_id, opened: self._outbox.put_nowait(
            (backend_id, opened))

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Run the sync and probe tasks while the block runs; cancel them after."""
        redis = aioredis.Redis.from_url(self._url, socket_connect_timeout=1.0)
        tasks = [asyncio.create_task(self._publish(redis)),
                 asyncio.create_task(self._subscribe(redis)),
                 asyncio.create_task(self._probes())]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await redis.aclose()

    async def _publish(self, redis: aioredis.Redis) -> None:
        while True:
            stop_if_cancelled()
            backend_id, opened = await self._outbox.get()
            message = f"{'open' if opened else 'close'} {backend_id} {self.replica}"
            try:
                await redis.publish(self._channel, message)
                self.published += 1
            except (RedisError, OSError) as exc:  # the others keep their own thresholds
                stop_if_cancelled(exc)
                self._log.warning("breaker_publish_failed", backend=backend_id,
                                  error=type(exc).__name__)

    async def _subscribe(self, redis: aioredis.Redis) -> None:
        while True:
            try:
                async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self._channel)
                    async for message in pubsub.listen():
                        self._adopt(message["data"])
            except (RedisError, OSError) as exc:
                stop_if_cancelled(exc)
                await asyncio.sleep(self._poll_s)
            stop_if_cancelled()

    def _adopt(self, data: bytes) -> None:
        try:
            kind, backend_id, replica = data.decode().split(" ")
        except (UnicodeDecodeError, ValueError):
            return
        if replica != self.replica:
            self.adopted += 1
            self._breaker.adopt(backend_id, kind == "open", self._clock())

    async def _probes(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            await self.sync_probes()
            stop_if_cancelled()

    async def sync_probes(self) -> None:
        """One round: take the probe lease for each backend newly half-open here, release
        those no longer half-open."""
        async with self._round:
            await self._probe_round()

    async def _probe_round(self) -> None:
        now = self._clock()
        views = self._breaker.views()
        for backend_id, lease_id in list(self._leases.items()):
            view = views.get(backend_id)
            if view is None or view.state(now) is not BreakerState.HALF_OPEN:
                del self._leases[backend_id]
                await self._store.release(_lease_name(backend_id), lease_id)
        for backend_id, view in views.items():
            if backend_id in self._leases or view.state(now) is not BreakerState.HALF_OPEN:
                continue
            lease_id = await self._store.lease(_lease_name(backend_id), 1, self._ttl)
            if lease_id is not None:
                self._leases[backend_id] = lease_id
            self._breaker.grant_probes(backend_id, lease_id is not None)


def _lease_name(backend_id: str) -> str:
    return f"breaker-probe:{{{backend_id}}}"
