"""The router-side prefix index shared by a fleet of replicas through Redis, off the request
path (``anchor/prefix.py``: what each replica learned from its own routing decisions).

Every ``interval_s`` seconds (default 0.1) a ``FleetPrefix`` makes one round trip to Redis
(a pipeline): ``XADD <prefix>prefix MAXLEN ~ <keep>`` of each record this replica made since
the last exchange (fields ``r`` = its random id, ``b`` = the backend, ``k`` = the prompt's
keys packed as big-endian unsigned 64-bit ints) and ``XREAD`` of what the stream holds past
the last entry read (at most ``batch`` entries; a new replica starts from the stream's
oldest entry, so it learns what the fleet holds). The other replicas' records go into this
replica's index as if it had made them. No request waits on Redis: a request costs no round
trip at all, and the fleet's exchanges cost one per interval whatever the traffic.

Bounds: the stream keeps about ``keep`` entries (Redis trims it); the outbox keeps the last
``outbox`` records while Redis is out of reach; records for backends this replica does not
route to are ignored (so a foreign stream cannot grow the index), as are entries that do not
parse. Redis out of reach (or slower than ``timeout_s``): the replica routes on its own
index — which always holds its own records — logged once per change of state and counted in
``outages``; the next interval tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import struct
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from llmroute.state.guard import repeat, stop_if_cancelled

Record = tuple[str, Sequence[int]]
"""``(backend_id, prompt keys)``: one routing decision."""


class FleetPrefix:
    """Shares ``records`` (drained each exchange; ``take_records()`` → new records) and
    feeds the others' to ``apply(backend_id, keys)``, for ``backends`` only (module
    docstring). Nothing runs until ``run``."""

    def __init__(self, take_records: Callable[[], list[Record]],
                 apply: Callable[[str, Sequence[int]], None], backends: Iterable[str],
                 redis: aioredis.Redis, *, prefix: str = "llmroute:", interval_s: float = 0.1,
                 keep: int = 20_000, batch: int = 2_000, outbox: int = 4_096,
                 timeout_s: float = 0.25):
        self._take, self._apply, self._backends = take_records, apply, set(backends)
        self._redis, self._key, self._interval = redis, prefix + "prefix", interval_s
        self._keep, self._batch, self._timeout = keep, batch, timeout_s
        self._outbox: deque[Record] = deque(maxlen=outbox)
        self._last = "0-0"
        self.replica = secrets.token_hex(6)
        self.up, self.outages, self.applied, self.ignored = True, 0, 0, 0
        self.exchanges = 0
        self._log = structlog.get_logger("llmroute.fleet")

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[FleetPrefix]:
        """Exchange every ``interval_s`` while the block runs."""
        task = asyncio.create_task(repeat(self.exchange, self._interval))
        try:
            yield self
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def exchange(self) -> None:
        """One round trip: publish this replica's new records, read the others'."""
        self._outbox.extend(self._take())
        sending = list(self._outbox)
        self.exchanges += 1
        try:
            async with asyncio.timeout(self._timeout):
                pipe = self._redis.pipeline(transaction=False)
                for backend_id, keys in sending:
                    pipe.xadd(self._key, {"r": self.replica, "b": backend_id,
                                          "k": _pack(keys)},
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
            self._log.info("fleet_prefix_available")

    def _read(self, reply: Any) -> None:
        """Apply the others' entries of one ``XREAD`` reply."""
        for _stream, entries in reply or ():
            for entry_id, fields in entries:
                self._last = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                self._entry(fields)

    def _entry(self, fields: dict[bytes, bytes]) -> None:
        replica = fields.get(b"r", b"").decode(errors="replace")
        backend = fields.get(b"b", b"").decode(errors="replace")
        packed = fields.get(b"k", b"")
        if replica == self.replica:
            return
        if backend not in self._backends or not packed or len(packed) % 8:
            self.ignored += 1
            return
        self._apply(backend, struct.unpack(f">{len(packed) // 8}Q", packed))
        self.applied += 1

    def _went_down(self, exc: BaseException) -> None:
        if self.up:
            self.up = False
            self.outages += 1
            self._log.warning("fleet_prefix_unavailable", error=type(exc).__name__,
                              routing="on this replica's own prefix index")


def _pack(keys: Sequence[int]) -> bytes:
    return struct.pack(f">{len(keys)}Q", *keys)
