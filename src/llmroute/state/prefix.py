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

import struct
from collections.abc import Callable, Iterable, Sequence

import redis.asyncio as aioredis

from llmroute.state.stream import StreamExchange

Record = tuple[str, Sequence[int]]
"""``(backend_id, prompt keys)``: one routing decision."""


class FleetPrefix(StreamExchange[Record]):
    """Shares ``records`` (drained each exchange; ``take_records()`` → new records) and
    feeds the others' to ``apply(backend_id, keys)``, for ``backends`` only (module
    docstring; the exchange itself is ``state/stream.py``'s). Nothing runs until ``run``.
    Counts besides the exchange's: ``ignored`` (foreign backends, unparsable entries)."""

    def __init__(self, take_records: Callable[[], list[Record]],
                 apply: Callable[[str, Sequence[int]], None], backends: Iterable[str],
                 redis: aioredis.Redis, *, prefix: str = "llmroute:", interval_s: float = 0.1,
                 keep: int = 20_000, batch: int = 2_000, outbox: int = 4_096,
                 timeout_s: float = 0.25):
        super().__init__(take_records, redis, prefix + "prefix", interval_s=interval_s,
                         keep=keep, batch=batch, outbox=outbox, timeout_s=timeout_s,
                         log="llmroute.fleet", event="fleet_prefix",
                         degraded={"routing": "on this replica's own prefix index"})
        self._apply, self._backends = apply, set(backends)
        self.ignored = 0

    def _fields(self, item: Record) -> dict[str, bytes | str]:
        backend_id, keys = item
        return {"b": backend_id, "k": struct.pack(f">{len(keys)}Q", *keys)}

    def _entry(self, fields: dict[bytes, bytes]) -> None:
        backend = fields.get(b"b", b"").decode(errors="replace")
        packed = fields.get(b"k", b"")
        if backend not in self._backends or not packed or len(packed) % 8:
            self.ignored += 1
            return
        self._apply(backend, struct.unpack(f">{len(packed) // 8}Q", packed))
        self.applied += 1
