"""What a fleet of replicas shares through one Redis stream, off the request path: the base
of ``state/prefix.py`` (the prefix index) and ``state/answers.py`` (the answer cache).

Every ``interval_s`` seconds a ``StreamExchange`` makes one round trip to Redis (a
pipeline): ``XADD <key> MAXLEN ~ <keep>`` of each item this replica queued since the last
exchange (its fields, plus ``r`` = the replica's random id) and ``XREAD`` of what the
stream holds past the last entry read (at most ``batch``; a new replica starts from the
stream's oldest entry, so it learns what the fleet holds, in order). The other replicas'
entries are handed to ``_entry``; this replica's own come back and are skipped.

No request waits on Redis. Redis out of reach (or slower than ``timeout_s``): the replica
goes on with what it has, logged once per change of state and counted in ``outages``; the
queued items are kept (the newest ``outbox``) and sent when Redis answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Generic, TypeVar

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from llmroute.state.guard import repeat, stop_if_cancelled

T = TypeVar("T")


class StreamExchange(Generic[T]):
    """Sends the items ``take()`` returns (each as ``_fields(item)``) and reads the others'
    (``_entry(fields)``) on the stream ``key`` (module docstring); ``event`` names the log
    lines (``<event>_unavailable`` with ``degraded`` as its fields, ``<event>_available``).
    Nothing runs until ``run``. Counts: ``exchanges``, ``outages``, ``applied`` (the
    subclass counts what it applies)."""

    def __init__(self, take: Callable[[], list[T]], redis: aioredis.Redis, key: str, *,
                 interval_s: float, keep: int, batch: int, outbox: int, timeout_s: float,
                 log: str, event: str, degraded: Mapping[str, str]):
        self._take, self._redis, self._key = take, redis, key
        self._interval, self._keep = interval_s, keep
        self._batch, self._timeout = batch, timeout_s
        self._outbox: deque[T] = deque(maxlen=outbox)
        self._last = "0-0"
        self.replica = secrets.token_hex(6)
        self.up, self.outages, self.applied, self.exchanges = True, 0, 0, 0
        self._log, self._event, self._degraded = structlog.get_logger(log), event, degraded

    def _fields(self, item: T) -> dict[str, Any]:
        """The stream fields of one of this replica's items (besides ``r``)."""
        raise NotImplementedError

    def _entry(self, fields: dict[bytes, bytes]) -> None:
        """Apply another replica's entry (its raw fields)."""
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[StreamExchange[T]]:
        """Exchange every ``interval_s`` while the block runs."""
        task = asyncio.create_task(repeat(self.exchange, self._interval))
        try:
            yield self
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def exchange(self) -> None:
        """One round trip: send this replica's queued items, apply the others' entries."""
        self._outbox.extend(self._take())
        sending = list(self._outbox)
        self.exchanges += 1
        try:
            async with asyncio.timeout(self._timeout):
                pipe = self._redis.pipeline(transaction=False)
                for item in sending:
                    pipe.xadd(self._key, {"r": self.replica, **self._fields(item)},
                              maxlen=self._keep, approximate=True)
                pipe.xread({self._key: self._last}, count=self._batch)
                replies = await pipe.execute()
        except (RedisError, OSError, TimeoutError) as exc:
            stop_if_cancelled(exc)
            self._went_down(exc)
            return
        for _ in sending:
            self._outbox.popleft()
        self._read(replies[-1])
        if not self.up:
            self.up = True
            self._log.info(f"{self._event}_available")

    def _read(self, reply: Any) -> None:
        """Apply the others' entries of one ``XREAD`` reply."""
        for _stream, entries in reply or ():
            for entry_id, fields in entries:
                self._last = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                if fields.get(b"r", b"").decode(errors="replace") != self.replica:
                    self._entry(fields)

    def _went_down(self, exc: BaseException) -> None:
        if self.up:
            self.up = False
            self.outages += 1
            self._log.warning(f"{self._event}_unavailable", error=type(exc).__name__,
                              **self._degraded)
