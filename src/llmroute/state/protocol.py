"""The state-store contract: what rate limits, quotas and concurrency caps share.

Three kinds of state, each named by a string the caller builds (``rpm:key:{tenant}:<id>``,
…; the ``{…}`` hash tag puts every name of one ``reserve`` in one Redis Cluster slot):

* ``Bucket`` — a token bucket holding at most ``capacity`` units, refilled continuously at
  ``capacity / period_s`` per second (RPM: capacity = rpm, period = 60 s). It may go below
  zero (debt) when a reconciliation charges more than was reserved.
* ``Counter`` — a quota counting up to ``limit`` units; it resets (vanishes) ``ttl_s``
  seconds after its first charge (the caller puts the day or month in the name and the
  seconds to its end in ``ttl_s``).
* leases — at most ``limit`` holders of a name at once; each expires after ``ttl_s``
  unless released (a replica that died frees its leases).

``reserve`` is the one check-and-reserve: every charge of a call fits and all are taken, or
none is (no read-modify-write race between callers, whatever the implementation: the
in-process store runs each call without an ``await`` inside it; a Redis store runs one Lua
script per call, with every name of a call in one hash slot). ``adjust`` reconciles after
the fact and never refuses. ``admit`` is ``reserve`` and ``lease`` in one atomic call
(every charge and every lease, or nothing), ``settle`` is ``adjust`` and ``release`` in
one call: an admitted request costs a Redis store one round trip in and at most one out.
The values built per call (``Charge``, ``Counter``, ``Level``, ``Grant``) are named tuples,
cheap to build on the request path, and a plain ``(limit, cost)`` pair is a charge too.
Times are the store's own clock: the in-process store's injected clock, Redis's ``TIME``;
callers pass durations, never instants. Every call
returns within the store's time bound or raises ``StateUnavailable``, except that a store
may take ``adjust`` and ``settle`` without waiting for them to be applied (the Redis
store: queued, in order before its later calls); it then counts a failure instead of
raising it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token bucket ``name``: at most ``capacity`` units (> 0), refilled at ``rate`` =
    ``capacity / period_s`` units per second."""

    name: str
    capacity: float
    period_s: float
    rate: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", self.capacity / self.period_s)


class Counter(NamedTuple):
    """A quota counter ``name`` of at most ``limit`` units, reset ``ttl_s`` seconds after
    its first charge (a named tuple: a caller builds one per call, its TTL running to the
    end of the day or month)."""

    name: str
    limit: float
    ttl_s: float


Limit = Bucket | Counter


@dataclass(frozen=True, slots=True)
class Lease:
    """Concurrency ``name``: at most ``limit`` holders at once, each lease lapsing
    ``ttl_s`` seconds after it was taken unless released."""

    name: str
    limit: int
    ttl_s: float


class Charge(NamedTuple):
    """``cost`` units (≥ 0 for ``reserve``; any sign for ``adjust``, < 0 gives back) on
    ``limit``. The stores read a charge by position: a plain ``(limit, cost)`` pair is one
    too (``Charges``)."""

    limit: Limit
    cost: float


Charges = Sequence[tuple[Limit, float]]
"""The charges of one call, in order: ``Charge`` records or plain ``(limit, cost)``
pairs."""


class Level(NamedTuple):
    """One limit after a call: ``remaining`` units (a bucket in debt: < 0) and ``reset_s``,
    seconds until the bucket is full again or the counter resets."""

    remaining: float
    reset_s: float


class Grant(NamedTuple):
    """The answer to ``reserve``: ``allowed`` (every charge taken) or not (none taken);
    ``flat_levels`` each charge's ``Level`` in call order (after the charges when allowed),
    flattened: remaining units, then seconds to reset, per charge (``levels`` reads them
    as Level records); when refused, ``denied`` is the index of the first charge that did
    not fit and ``retry_after_s`` the seconds until the whole call would fit (None: never —
    a cost above its limit). From ``admit``: ``lease_ids`` per lease in call order when
    allowed; ``full`` the index of the first lease already at its limit (it refuses the
    call before any charge does; then ``denied`` is None)."""

    allowed: bool
    flat_levels: tuple[float, ...]
    denied: int | None = None
    retry_after_s: float | None = 0.0
    lease_ids: tuple[str, ...] = ()
    full: int | None = None

    @property
    def levels(self) -> tuple[Level, ...]:
        """One Level per charge, in call order."""
        flat = self.flat_levels
        return tuple([Level(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)])


class StateStore(Protocol):
    """Shared policy state (module docstring). Every method raises StateUnavailable when
    the store cannot answer within its time bound (``adjust`` and ``settle`` may instead
    count the failure: module docstring).

    ``queues_settlements``: True when ``adjust`` and ``settle`` return once queued, before
    they are applied (their return then proves nothing about the store: ``state/guard.py``
    never probes with them); ``lost`` counts the queued ones the store did not take (0 for
    a store that waits for them)."""

    queues_settlements: bool

    @property
    def lost(self) -> int:
        """Settlements sent but not applied (their state lapses by TTL)."""
        ...

    async def reserve(self, charges: Charges) -> Grant:
        """Take every charge, or none when one does not fit (a bucket below its cost, a
        counter whose value plus cost passes its limit); see ``Grant``."""
        ...

    async def adjust(self, charges: Charges) -> None:
        """Reconcile: consume ``cost`` more units of each limit (``cost`` < 0 gives units
        back), without a check. A bucket never rises above its capacity; a counter never
        falls below 0; a counter not yet charged starts its TTL now."""
        ...

    async def lease(self, name: str, limit: int, ttl_s: float) -> str | None:
        """A lease id when fewer than ``limit`` unexpired leases on ``name`` are held (the
        new one expires ``ttl_s`` seconds from now), else None."""
        ...

    async def release(self, name: str, lease_id: str) -> None:
        """End lease ``lease_id`` on ``name``; an unknown or expired lease is ignored."""
        ...

    async def admit(self, charges: Charges, leases: Sequence[Lease]) -> Grant:
        """``reserve(charges)`` and one ``lease`` per lease, atomically: all taken, or
        nothing when a lease is full (``Grant.full``) or a charge does not fit."""
        ...

    async def settle(self, charges: Charges, held: Sequence[tuple[str, str]]) -> None:
        """``adjust(charges)`` and ``release(name, lease_id)`` for each of ``held``, in one
        call."""
        ...

    async def ping(self) -> None:
        """Return once the store answers (the in-process store always does)."""
        ...

    async def close(self) -> None:
        """Release the store's connections (nothing for the in-process store)."""
        ...
