"""The in-process state store: buckets, counters and leases in dicts, on an injected clock.

Each call runs to completion without an ``await`` inside it, so on one event loop every
call is atomic: ``reserve`` never admits past a limit, however many requests race. State
that expired (counters past their TTL, leases past theirs) is dropped when next touched,
and every ``SWEEP_EVERY`` calls that take (reserve, lease, admit) a sweep drops expired
counters and full buckets (a full bucket is the same as an absent one), so memory follows
the active keys only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from llmroute.state.protocol import Charges, Counter, Grant, Lease, Limit

EPS = 1e-9
"""Units of float rounding forgiven when a bucket's level is compared with a cost (a
refill of exactly the cost after exactly the advertised wait must fit)."""
SWEEP_EVERY = 4096
"""Calls that take between two sweeps of expired counters and full buckets."""


class MemoryStore:
    """``StateStore`` in this process; ``clock`` gives monotonic seconds. Every call is
    applied before it returns: nothing is queued, nothing lost."""

    queues_settlements = False
    lost = 0

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._buckets: dict[str, list[float]] = {}  # name → [level, at, capacity, rate]
        self._counters: dict[str, list[float]] = {}  # name → [value, expires_at]
        self._leases: dict[str, dict[str, float]] = {}  # name → {lease id: expires_at}
        self._soonest: dict[str, float] = {}  # name → no lease on it expires before this
        self._ids = itertools.count(1)
        self._calls = 0

    async def reserve(self, charges: Charges) -> Grant:
        """See ``StateStore.reserve``."""
        return self._admit(charges, (), self._clock())

    async def adjust(self, charges: Charges) -> None:
        """See ``StateStore.adjust``."""
        self._adjust(charges, self._clock())

    async def lease(self, name: str, limit: int, ttl_s: float) -> str | None:
        """See ``StateStore.lease``."""
        grant = self._admit((), (Lease(name, limit, ttl_s),), self._clock())
        return grant.lease_ids[0] if grant.allowed else None

    async def release(self, name: str, lease_id: str) -> None:
        """See ``StateStore.release``."""
        self._release(name, lease_id)

    async def admit(self, charges: Charges, leases: Sequence[Lease]) -> Grant:
        """See ``StateStore.admit``."""
        return self._admit(charges, leases, self._clock())

    async def settle(self, charges: Charges, held: Sequence[tuple[str, str]]) -> None:
        """See ``StateStore.settle``."""
        if charges:
            self._adjust(charges, self._clock())
        for name, lease_id in held:
            self._release(name, lease_id)

    async def ping(self) -> None:
        """Always answers."""

    async def close(self) -> None:
        """Nothing to release."""

    def _admit(self, charges: Charges, leases: Sequence[Lease], now: float) -> Grant:
        """A full lease, else the first charge that does not fit, refuses the call; else
        every charge and lease is taken."""
        self._calls += 1
        if self._calls % SWEEP_EVERY == 0:
            self._sweep(now)
        states, refused = self._live(charges, now)
        helds = []
        for lease in leases:
            held = self._held(lease.name, now)
            if len(held) >= lease.limit:
                return Grant(False, _levels(charges, states, now), full=len(helds))
            helds.append(held)
        if refused is not None:
            return Grant(False, _levels(charges, states, now), refused,
                         _retry(charges, states, now))
        ids = []
        soonest = self._soonest
        for held, lease in zip(helds, leases):
            lid = str(next(self._ids))
            until = held[lid] = now + lease.ttl_s
            soonest[lease.name] = min(soonest.get(lease.name, until), until)
            ids.append(lid)
        return Grant(True, _take(charges, states, now), None, 0.0, tuple(ids))

    def _live(self, charges: Charges, now: float) -> tuple[list[list[float]], int | None]:
        """Each charge's live state (``_state``) and the index of the first charge that
        does not fit (None: all fit)."""
        states: list[list[float]] = []
        refused = None
        for limit, cost in charges:
            s = self._state(limit, now)
            fits = s[0] + cost <= limit.limit if type(limit) is Counter else s[0] + EPS >= cost
            if not fits and refused is None:
                refused = len(states)
            states.append(s)
        return states, refused

    def _adjust(self, charges: Charges, now: float) -> None:
        for limit, cost in charges:
            s = self._state(limit, now)
            if type(limit) is Counter:
                value = s[0] + cost
                s[0] = value if value > 0.0 else 0.0
            else:
                level = s[0] - cost
                s[0] = level if level < limit.capacity else limit.capacity

    def _release(self, name: str, lease_id: str) -> None:
        held = self._leases.get(name)
        if held is not None:
            held.pop(lease_id, None)
            if not held:
                del self._leases[name]
                self._soonest.pop(name, None)

    def _held(self, name: str, now: float) -> dict[str, float]:
        """The unexpired leases on ``name`` (lease id → expiry), expired ones dropped. The
        held leases are scanned only once the soonest expiry among them has come, so a
        call costs the same however many requests hold a lease on ``name``."""
        held = self._leases.get(name)
        if held is None:
            held = self._leases[name] = {}
        elif now >= self._soonest.get(name, now):
            for lid in [lid for lid, until in held.items() if until <= now]:
                del held[lid]
            if held:
                self._soonest[name] = min(held.values())
            else:
                self._soonest.pop(name, None)
        return held

    def _state(self, limit: Limit, now: float) -> list[float]:
        """The limit's live state, refilled (bucket) or reset when expired (counter)."""
        if type(limit) is Counter:
            s = self._counters.get(limit.name)
            if s is None or s[1] <= now:
                s = self._counters[limit.name] = [0.0, now + limit.ttl_s]
            return s
        s = self._buckets.get(limit.name)
        cap = limit.capacity
        if s is None:
            s = self._buckets[limit.name] = [cap, now, cap, limit.rate]
        else:
            level = s[0] + (now - s[1]) * cap / limit.period_s
            s[0] = level if level < cap else cap
            s[1], s[2], s[3] = now, cap, limit.rate
        return s

    def _sweep(self, now: float) -> None:
        self._counters = {k: s for k, s in self._counters.items() if s[1] > now}
        self._buckets = {k: s for k, s in self._buckets.items()
                         if s[0] + (now - s[1]) * s[3] < s[2]}


def _retry(charges: Charges, states: list[list[float]], now: float) -> float | None:
    """Seconds until every charge fits (None: never, a cost above its limit)."""
    retry = 0.0
    for (limit, cost), s in zip(charges, states):
        if type(limit) is Counter:
            if s[0] + cost <= limit.limit:
                continue
            if cost > limit.limit:
                return None
            retry = max(retry, s[1] - now)
        elif s[0] + EPS < cost:
            if cost > limit.capacity:
                return None
            retry = max(retry, (cost - s[0]) / limit.rate)
    return retry


def _levels(charges: Charges, states: list[list[float]], now: float) -> tuple[float, ...]:
    """Each charge's limit as it stands, flattened (``Grant.flat_levels``): remaining
    units, then seconds until the bucket is full or the counter resets."""
    out: list[float] = []
    for (limit, _), s in zip(charges, states):
        if type(limit) is Counter:
            reset = s[1] - now
            out += (limit.limit - s[0], reset if reset >= 0.0 else 0.0)
        else:
            room = limit.capacity - s[0]
            out += (s[0], (room if room >= 0.0 else 0.0) / limit.rate)
    return tuple(out)


def _take(charges: Charges, states: list[list[float]], now: float) -> tuple[float, ...]:
    """Take every charge; the limits' levels after (``_levels``)."""
    for (limit, cost), s in zip(charges, states):
        s[0] += cost if type(limit) is Counter else -cost
    return _levels(charges, states, now)
