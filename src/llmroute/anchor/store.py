"""The latest engine/GPU signals per backend, with their age and the collector's view of
each endpoint (up, down, unknown). Written only by the collector; read by the anchor (as
fresh snapshots) and by ``/debug/backends`` (everything, stale included).

Staleness: a snapshot is *fresh* while ``now - taken_at ≤ stale_after_s`` (seconds). The
anchor sees only fresh snapshots: a stale or missing one is absent, and the profile scores
that backend with the signals it still has (router-side counters always exist) and
renormalises the weights over them (``anchor/profile.py``) — a stale engine never turns
the decision into a coin toss.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from llmroute.types import EngineSignals

State = Literal["unknown", "up", "down"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One backend's collector state: the last good ``signals`` (or None), the clock time
    of the last poll attempt ``polled_at`` (s), consecutive ``failures``, the last ``error``
    message, and ``state`` (``up`` after a good poll, ``down`` after a failed one)."""

    signals: EngineSignals | None = None
    polled_at: float | None = None
    failures: int = 0
    error: str | None = None
    state: State = "unknown"


class SignalStore:
    """Latest snapshot per backend id; ``stale_after_s`` seconds decides freshness."""

    def __init__(self, stale_after_s: float):
        self.stale_after_s = stale_after_s
        self._entries: dict[str, Entry] = {}

    def record_ok(self, backend_id: str, signals: EngineSignals, now: float) -> Entry:
        """Store a good poll's ``signals``; returns the previous entry."""
        old = self.entry(backend_id)
        self._entries[backend_id] = Entry(signals, now, 0, None, "up")
        return old

    def record_failure(self, backend_id: str, error: str, now: float) -> Entry:
        """Count a failed poll (the last good signals are kept and age); returns the
        previous entry."""
        old = self.entry(backend_id)
        self._entries[backend_id] = replace(old, polled_at=now, failures=old.failures + 1,
                                            error=error, state="down")
        return old

    def entry(self, backend_id: str) -> Entry:
        """The backend's entry (an empty ``unknown`` one when never polled)."""
        return self._entries.get(backend_id, Entry())

    def age(self, backend_id: str, now: float) -> float | None:
        """Seconds since the backend's last good signals were taken; None when none."""
        signals = self.entry(backend_id).signals
        return None if signals is None else max(now - signals.taken_at, 0.0)

    def is_fresh(self, backend_id: str, now: float) -> bool:
        """True when the backend has signals no older than ``stale_after_s``."""
        age = self.age(backend_id, now)
        return age is not None and age <= self.stale_after_s

    def fresh(self, now: float) -> dict[str, EngineSignals]:
        """``{backend_id: signals}`` for every backend whose signals are fresh at ``now``."""
        return {bid: e.signals for bid, e in self._entries.items()
                if e.signals is not None and now - e.signals.taken_at <= self.stale_after_s}
