"""The answer cache shared by a fleet of replicas through Redis, off the request path
(``cache/answers.py``: each replica keeps its own entries and vector index in process).

Every ``interval_s`` seconds (default 0.1) a ``FleetAnswers`` makes one round trip to Redis
(a pipeline): ``XADD <prefix>answers MAXLEN ~ <keep>`` of each event this replica queued
since the last exchange (fields ``r`` = its random id, ``k`` = ``put`` or ``purge``, ``d`` =
the encoded entry or purge) and ``XREAD`` of what the stream holds past the last entry read
(at most ``batch``; a new replica starts from the stream's oldest entry, so it learns the
fleet's entries and the purges that followed them, in order). The other replicas' events
are applied to this replica's cache; one that does not decode is dropped and counted there.

No request waits on Redis: a lookup reads only this replica's entries, so a slow or lost
Redis can never delay an answer; it only delays sharing. Redis out of reach (or slower than
``timeout_s``): the replica serves from its own entries, logged once per change of state
and counted in ``outages``; the queued events are kept (the newest ``OUTBOX``) and sent
when Redis answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from llmroute.state.guard import repeat, stop_if_cancelled

Event = tuple[str, bytes]
"""``(kind, data)``: ``("put", encoded entry)`` or ``("purge", JSON)``."""


class FleetAnswers:
    """Sends ``take_events()`` and hands the others' to ``apply(kind, data)`` (module
    docstring). Nothing runs until ``run``."""

    def __init__(self, take_events: Callable[[], list[Event]],
                 apply: Callable[[str, bytes], None], redis: aioredis.Redis, *,
                 prefix: str = "llmroute:", interval_s: float = 0.1, keep: int = 10_000,
                 batch: int = 1_000, timeout_s: float = 0.25):
        self._take, self._apply, self._redis = take_events, apply, redis
        self._key, self._interval, self._keep = prefix + "answers", interval_s, keep
        self._batch, self._timeout = batch, timeout_s
        self._pending: list[Event] = []
        self._last = "0-0"
        self.replica = secrets.token_hex(6)
        self.up, self.outages, self.applied = True, 0, 0
        self._log = structlog.get_logger("llmroute.cache")

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[FleetAnswers]:
        """Exchange every ``interval_s`` while the block runs."""
        task = asyncio.create_task(repeat(self.exchange, self._interval))
        try:
            yield self
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def exchange(self) -> None:
        """One round trip: send this replica's events, apply the others'."""
        self._pending = (self._pending + self._take())[-OUTBOX:]
        try:
            async with asyncio.timeout(self._timeout):
                pipe = self._redis.pipeline(transaction=False)
                for kind, data in self._pending:
                    pipe.xadd(self._key, {"r": self.replica, "k": kind, "d": data},
                              maxlen=self._keep, approximate=True)
                pipe.xread({self._key: self._last}, count=self._batch)
                replies = await pipe.execute()
        except (RedisError, OSError, TimeoutError) as exc:
            stop_if_cancelled(exc)
            self._down(exc)
            return
        self._pending = []
        self._read(replies[-1])
        if not self.up:
            self.up = True
            self._log.info("cache_fleet_available")

    def _read(self, reply: Any) -> None:
        for _stream, entries in reply or ():
            for entry_id, fields in entries:
                self._last = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                if fields.get(b"r", b"").decode(errors="replace") != self.replica:
                    self._apply(fields.get(b"k", b"").decode(errors="replace"),
                                fields.get(b"d", b""))
                    self.applied += 1

    def _down(self, exc: BaseException) -> None:
        if self.up:
            self.up = False
            self.outages += 1
            self._log.warning("cache_fleet_unavailable", error=type(exc).__name__,
                              serving="this replica's own entries")


OUTBOX = 4096
"""Events kept while Redis is out of reach (the newest)."""
