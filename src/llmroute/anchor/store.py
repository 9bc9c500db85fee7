"""The latest engine/GPU signals per backend, with their age and the collector's view of
each endpoint (up, down, unknown). Written only by the collector; read by the anchor (as
fresh snapshots and the dark set), by ``/ready`` and by ``/debug/backends`` (everything,
stale included).

Staleness: a snapshot is *fresh* while ``now - taken_at ≤ stale_after_s`` (seconds). The
anchor sees only fresh snapshots. A backend is *dark* when the collector has lost sight of
it: its last poll failed (``down``: refused, errored or timed out — a frozen engine), or its
last good signals are stale. The profile ranks a dark backend after every backend that is
not dark and scores it as if every engine-signal scorer gave it its worst value
(``anchor/profile.py``), so a hung or dead engine never outranks a healthy one. A backend
never polled (``unknown``: no metrics source, or before the first poll) is not dark. A
signal an engine simply does not expose is not staleness: that scorer leaves the backend
out and the profile renormalises over the rest.

Per good poll the store also runs the thermal latch (``hot``: GPUs too hot for new
requests, with hysteresis) and takes the median of the network readings
(``anchor/readings.py``), and counts each rejected reading (``rejected``: a temperature in
kelvin, a bandwidth ratio above 1 …) per backend and signal; a rejected reading is simply
absent from the snapshot.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Literal

from llmroute.anchor.readings import NetMedian, ThermalLatch
from llmroute.types import EngineSignals

State = Literal["unknown", "up", "down"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One backend's collector state: the last good ``signals`` (or None), the clock time
    of the last poll attempt ``polled_at`` (s), consecutive ``failures``, the last ``error``
    message, ``state`` (``up`` after a good poll, ``down`` after a failed one) and ``hot``
    (the thermal latch after the last good poll)."""

    signals: EngineSignals | None = None
    polled_at: float | None = None
    failures: int = 0
    error: str | None = None
    state: State = "unknown"
    hot: bool = False


class SignalStore:
    """Latest snapshot per backend id; ``stale_after_s`` seconds decides freshness;
    ``thermal`` is the latch that says which GPUs are hot (default: 78 °C, 3 °C of
    hysteresis). ``rejected`` counts the rejected readings by ``(backend_id, signal)``."""

    def __init__(self, stale_after_s: float, thermal: ThermalLatch | None = None):
        self.stale_after_s = stale_after_s
        self.thermal = thermal or ThermalLatch()
        self.rejected: Counter[tuple[str, str]] = Counter()
        self._net = NetMedian()
        self._entries: dict[str, Entry] = {}
        self._dark: tuple[float, int, frozenset[str]] | None = None  # (now, version, ids)
        self._version = 0

    def record_ok(self, backend_id: str, signals: EngineSignals, now: float) -> Entry:
        """Store a good poll's ``signals`` (network readings smoothed, the thermal latch
        updated, rejected readings counted); returns the previous entry."""
        old = self.entry(backend_id)
        signals = self._net.smooth(backend_id, signals)
        self.thermal.update(backend_id, signals.gpu_temp_c, now)
        for name in signals.rejected:
            self.rejected[backend_id, name] += 1
        hot = backend_id in self.thermal.hot(now, self.stale_after_s)
        self._entries[backend_id] = Entry(signals, now, 0, None, "up", hot)
        self._version += 1
        return old

    def hot(self, now: float) -> frozenset[str]:
        """Ids of the backends whose GPU is too hot for new requests at ``now`` (the
        thermal latch, over readings at most ``stale_after_s`` old)."""
        return self.thermal.hot(now, self.stale_after_s)

    def record_failure(self, backend_id: str, error: str, now: float) -> Entry:
        """Count a failed poll (the last good signals are kept and age); returns the
        previous entry."""
        old = self.entry(backend_id)
        self._entries[backend_id] = replace(old, polled_at=now, failures=old.failures + 1,
                                            error=error, state="down")
        self._version += 1
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
        """``{backend_id: signals}`` for every backend whose signals are fresh at ``now``
        (a backend whose last poll failed keeps them until they turn stale; it is ``dark``
        meanwhile). Computes ``dark(now)`` in the same pass."""
        return self._scan(now)[0]

    def dark(self, now: float) -> frozenset[str]:
        """Ids of the backends the collector has lost sight of at ``now``: the last poll
        failed (``down``) or the last good signals are older than ``stale_after_s``. Never
        polled backends are not dark. O(1) right after ``fresh(now)`` (one pass for both)."""
        memo = self._dark
        if memo is not None and memo[0] == now and memo[1] == self._version:
            return memo[2]
        return self._scan(now)[1]

    def _scan(self, now: float) -> tuple[dict[str, EngineSignals], frozenset[str]]:
        """``(fresh, dark)`` at ``now`` in one pass; ``dark`` is kept for ``dark(now)``."""
        out, dark, stale = {}, [], self.stale_after_s
        for bid, e in self._entries.items():
            signals = e.signals
            if signals is not None and now - signals.taken_at <= stale:
                out[bid] = signals
                if e.state == "down":
                    dark.append(bid)
            elif e.state != "unknown":
                dark.append(bid)
        ids = frozenset(dark)
        self._dark = (now, self._version, ids)
        return out, ids

    def state(self, backend_id: str, now: float) -> str:
        """The collector's view of one backend at ``now``: ``unknown`` (never polled, or no
        metrics source), ``up`` (fresh signals, last poll good), ``stale`` (last poll good,
        signals older than ``stale_after_s``: the collector stopped) or ``down``."""
        e = self.entry(backend_id)
        if e.state == "up" and not self.is_fresh(backend_id, now):
            return "stale"
        return e.state
