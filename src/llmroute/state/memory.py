"""The in-process state store: buckets, counters and leases in dicts, on an injected clock.

Each call runs to completion without an ``await`` inside it, so on one event loop every
call is atomic: ``reserve`` never admits past a limit, however many requests race. State
that expired (counters past their TTL, leases past theirs) is dropped when next touched,
and every ``SWEEP_EVERY`` reservations a sweep drops expired counters and full buckets
(a full bucket is the same as an absent one), so memory follows the active keys only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from llmroute.state.protocol import Bucket, Charge, Counter, Grant, Lease, Level

EPS = 1e-9
"""Units of float rounding forgiven when a bucket's level is compared with a cost (a
refill of exactly the cost after exactly the advertised wait must fit)."""
SWEEP_EVERY = 4096
"""Reservations between two sweeps of expired counters and full buckets."""


class MemoryStore:
    """``StateStore`` in this process; ``clock`` gives monotonic seconds."""

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._buckets: dict[str, list[float]] = {}  # name → [level, at, capacity, rate]
        self._counters: dict[str, list[float]] = {}  # name → [value, expires_at]
        self._leases: dict[str, dict[str, float]] = {}  # name → {lease id: expires_at}
        self._ids = itertools.count(1)
        self._calls = 0

    async def reserve(self, charges: Sequence[Charge]) -> Grant:
        """See ``StateStore.reserve``."""
        return self._reserve(charges, self._clock())

    async def adjust(self, charges: Sequence[Charge]) -> None:
        """See ``StateStore.adjust``."""
        self._adjust(charges, self._clock())

    async def lease(self, name: str, limit: int, ttl_s: float) -> str | None:
        """See ``StateStore.lease``."""
        grant = self._admit((), (Lease(name, limit, ttl_s),), self._clock())
        return grant.lease_ids[0] if grant.allowed else None

    async def release(self, name: str, lease_id: str) -> None:
        """See ``StateStore.release``."""
        self._release(name, lease_id)

    async def admit(self, charges: Sequence[Charge], leases: Sequence[Lease]) -> Grant:
        """See ``StateStore.admit``."""
        return self._admit(charges, leases, self._clock())

    async def settle(self, charges: Sequence[Charge], held: Sequence[tuple[str, str]]) -> None:
        """See ``StateStore.settle``."""
        self._adjust(charges, self._clock())
        for name, lease_id in held:
            self._release(name, lease_id)

    async def ping(self) -> None:
        """Always answers."""

    async def close(self) -> None:
        """Nothing to release."""

    def _admit(self, charges: Sequence[Charge], leases: Sequence[Lease], now: float) -> Grant:
        helds = [self._held(lease.name, now) for lease in leases]
        for i, (lease, held) in enumerate(zip(leases, helds)):
            if len(held) >= lease.limit:
                levels = tuple(_level(c.limit, self._state(c, now), now) for c in charges)
                return Grant(False, levels, full=i)
        grant = self._reserve(charges, now, leases)
        if grant.allowed:
            for held, lease, lid in zip(helds, leases, grant.lease_ids):
                held[lid] = now + lease.ttl_s
        return grant

    def _adjust(self, charges: Sequence[Charge], now: float) -> None:
        for c in charges:
            s = self._state(c, now)
            if isinstance(c.limit, Counter):
                s[0] = max(0.0, s[0] + c.cost)
            else:
                s[0] = min(c.limit.capacity, s[0] - c.cost)

    def _release(self, name: str, lease_id: str) -> None:
        held = self._leases.get(name)
        if held is not None:
            held.pop(lease_id, None)
            if not held:
                del self._leases[name]

    def _reserve(self, charges: Sequence[Charge], now: float, leases: Sequence[Lease] = ()
                 ) -> Grant:
        self._calls += 1
        if self._calls % SWEEP_EVERY == 0:
            self._sweep(now)
        states = [self._state(c, now) for c in charges]
        refused, retry = None, 0.0
        for i, (c, s) in enumerate(zip(charges, states)):
            w = _wait(c, s, now)
            if w != 0.0:
                if refused is None:
                    refused = i
                retry = None if w is None or retry is None else max(retry, w)
        if refused is not None:
            levels = tuple(_level(c.limit, s, now) for c, s in zip(charges, states))
            return Grant(False, levels, refused, retry)
        levels = []
        for c, s in zip(charges, states):
            s[0] += c.cost if isinstance(c.limit, Counter) else -c.cost
            levels.append(_level(c.limit, s, now))
        ids = tuple(str(next(self._ids)) for _ in leases)
        return Grant(True, tuple(levels), lease_ids=ids)

    def _held(self, name: str, now: float) -> dict[str, float]:
        """The unexpired leases on ``name`` (lease id → expiry), expired ones dropped."""
        held = self._leases.setdefault(name, {})
        for lid in [lid for lid, until in held.items() if until <= now]:
            del held[lid]
        return held

    def _state(self, charge: Charge, now: float) -> list[float]:
        """The limit's live state, refilled (bucket) or reset when expired (counter)."""
        limit = charge.limit
        if isinstance(limit, Counter):
            s = self._counters.get(limit.name)
            if s is None or s[1] <= now:
                s = self._counters[limit.name] = [0.0, now + limit.ttl_s]
            return s
        s = self._buckets.get(limit.name)
        if s is None:
            s = self._buckets[limit.name] = [limit.capacity, now, limit.capacity, limit.rate]
        else:
            s[0] = min(limit.capacity, s[0] + (now - s[1]) * limit.capacity / limit.period_s)
            s[1], s[2], s[3] = now, limit.capacity, limit.rate
        return s

    def _sweep(self, now: float) -> None:
        self._counters = {k: s for k, s in self._counters.items() if s[1] > now}
        self._buckets = {k: s for k, s in self._buckets.items()
                         if s[0] + (now - s[1]) * s[3] < s[2]}


def _wait(charge: Charge, s: list[float], now: float) -> float | None:
    """Seconds until ``charge`` fits (0.0: now; None: never)."""
    limit = charge.limit
    if isinstance(limit, Counter):
        if s[0] + charge.cost <= limit.limit:
            return 0.0
        return None if charge.cost > limit.limit else s[1] - now
    if s[0] + EPS >= charge.cost:
        return 0.0
    if charge.cost > limit.capacity:
        return None
    return (charge.cost - s[0]) / limit.rate


def _level(limit: Bucket | Counter, s: list[float], now: float) -> Level:
    if isinstance(limit, Counter):
        return Level(limit.limit - s[0], max(s[1] - now, 0.0))
    return Level(s[0], max(limit.capacity - s[0], 0.0) / limit.rate)
