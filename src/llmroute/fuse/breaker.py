"""Per-backend circuit breaker: closed → open → half-open → closed, on a failure *rate*.

Closed: requests flow; every finished attempt is kept for ``window_s`` seconds, and once at
least ``min_requests`` are in the window and the failed fraction reaches ``failure_rate``
the breaker opens. Open: no requests for ``cooldown_s`` seconds. Half-open: at most
``half_open_probes`` probes in flight (``begin`` counts one); that many successes close it
with an empty window, one failure re-opens it for another cool-down. This is the sliding
window, minimum-throughput and half-open-probe design of Resilience4j's ``CircuitBreaker``
(count-based threshold replaced by a time window). ``hold`` keeps a backend open for an
upstream ``Retry-After`` (RFC 9110 §10.2.3). Pure state over an injected clock
(``now`` in seconds); dispatch records outcomes.

Readers outside the fuse (the anchor's health filter and scorer, ``/debug/backends``, the
metrics gauge) read ``views()``: an immutable ``{backend_id: BreakerView}`` the breaker
replaces whenever a backend opens, is held, takes or frees a half-open probe slot, or
closes, so a snapshot takes a reference, not a loop. A backend absent from it is closed;
the views say when a cool-down or hold ends, so readers compare with their own ``now``.

A fleet (several replicas, ``state/breakers.py``) shares the transitions: ``on_transition``
(set by the composition root) hears each local open and close, ``adopt`` applies another
replica's, and with ``fleet_probes`` a half-open backend sends no probe until
``grant_probes`` says this replica holds the fleet's probe lease for it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import structlog

from llmroute.config import BreakerConfig
from llmroute.types import BreakerState, BreakerView, Outcome

log = structlog.get_logger("llmroute.breaker")


@dataclass(slots=True)
class _Entry:
    window: deque[tuple[float, bool]] = field(default_factory=deque)  # (time, failed)
    failures: int = 0  # failed attempts in ``window``, kept in step so reads are O(1)
    opened_at: float | None = None
    probes: int = 0
    probe_successes: int = 0
    held_until: float = float("-inf")
    probe_cap: int | None = None  # half-open probes granted here (None: the configured number)


class CircuitBreaker:
    """Breakers for a set of backends (keyed by backend id). ``fleet_probes``: after an
    open, no half-open probe until ``grant_probes``; ``on_transition(backend_id, opened)``
    is called on every local open (True) and close (False), never for adopted ones."""

    def __init__(self, config: BreakerConfig, *, fleet_probes: bool = False):
        self._config, self._fleet_probes = config, fleet_probes
        self._entries: dict[str, _Entry] = {}
        self._views: Mapping[str, BreakerView] = MappingProxyType({})
        self.on_transition: Callable[[str, bool], None] | None = None

    def adopt(self, backend_id: str, opened: bool, now: float) -> None:
        """Apply another replica's transition: open ``backend_id`` for a full cool-down from
        ``now``, or close it (a hold stays)."""
        if opened:
            self._open(backend_id, self._entry(backend_id), now, local=False)
        elif backend_id in self._entries:
            self._close(backend_id, self._entries[backend_id], now, local=False)

    def grant_probes(self, backend_id: str, granted: bool) -> None:
        """With ``fleet_probes``: this replica may (``granted``) or may not send the
        configured half-open probes to ``backend_id`` until it next opens or closes."""
        entry = self._entries.get(backend_id)
        if entry is not None and entry.opened_at is not None:
            entry.probe_cap = self._config.half_open_probes if granted else 0
            self._publish(backend_id)

    def views(self) -> Mapping[str, BreakerView]:
        """``{backend_id: BreakerView}`` of every backend that has opened or been held since
        it last closed (read-only; replaced, never changed, on each transition). Every other
        backend is closed. May include backends whose hold or cool-down has since lapsed."""
        return self._views

    @property
    def flagged(self) -> frozenset[str]:
        """The backend ids in ``views``: every other backend is closed."""
        return frozenset(self._views)

    def state(self, backend_id: str, now: float) -> BreakerState:
        """The breaker's state for ``backend_id`` at ``now``."""
        view = self._views.get(backend_id)
        return BreakerState.CLOSED if view is None else view.state(now)

    def allow(self, backend_id: str, now: float) -> bool:
        """True when a request may be sent: closed, or half-open with a probe slot free."""
        view = self._views.get(backend_id)
        return view is None or view.allows(now)

    def begin(self, backend_id: str, now: float) -> None:
        """A request is being sent to ``backend_id``; in half-open it takes a probe slot."""
        if self.state(backend_id, now) is BreakerState.HALF_OPEN:
            self._entry(backend_id).probes += 1
            self._publish(backend_id)

    def release(self, backend_id: str) -> None:
        """A request ended without a verdict on the engine (client gone, handed off by the
        entropy trigger, the client's own 4xx): free its probe slot, count nothing."""
        entry = self._entries.get(backend_id)
        if entry is not None and entry.probes:
            entry.probes -= 1
            self._publish(backend_id)

    def record(self, backend_id: str, outcome: Outcome, now: float) -> None:
        """Count one attempt's outcome; may open, re-open or close the breaker."""
        entry = self._entry(backend_id)
        state = self.state(backend_id, now)
        failed = outcome is Outcome.FAILURE
        if state is BreakerState.HALF_OPEN:
            self._probe_result(backend_id, entry, failed, now)
        elif state is BreakerState.CLOSED:
            entry.window.append((now, failed))
            entry.failures += failed
            self._trim(entry, now)
            if self._tripped(entry):
                self._open(backend_id, entry, now)

    def hold(self, backend_id: str, seconds: float, now: float) -> None:
        """Keep ``backend_id`` open for ``seconds`` (an upstream ``Retry-After``), whatever
        its failure rate; afterwards it returns to the state it had."""
        entry = self._entry(backend_id)
        entry.held_until = max(entry.held_until, now + seconds)
        self._publish(backend_id)

    def failure_rate(self, backend_id: str, now: float) -> float:
        """Failed fraction (0–1) of the attempts in the window; 0 with none."""
        entry = self._entry(backend_id)
        self._trim(entry, now)
        n = len(entry.window)
        return entry.failures / n if n else 0.0

    def _entry(self, backend_id: str) -> _Entry:
        entry = self._entries.get(backend_id)
        if entry is None:  # not setdefault: that would build an _Entry on every call
            entry = self._entries[backend_id] = _Entry()
        return entry

    def _trim(self, entry: _Entry, now: float) -> None:
        while entry.window and entry.window[0][0] <= now - self._config.window_s:
            entry.failures -= entry.window.popleft()[1]

    def _tripped(self, entry: _Entry) -> bool:
        n = len(entry.window)
        return n >= self._config.min_requests and \
            entry.failures >= self._config.failure_rate * n

    def _probe_result(self, backend_id: str, entry: _Entry, failed: bool, now: float) -> None:
        entry.probes = max(entry.probes - 1, 0)
        if failed:
            self._open(backend_id, entry, now)
            return
        entry.probe_successes += 1
        if entry.probe_successes >= self._config.half_open_probes:
            self._close(backend_id, entry, now)
            return
        self._publish(backend_id)

    def _close(self, backend_id: str, entry: _Entry, now: float, local: bool = True) -> None:
        self._entries[backend_id] = _Entry(held_until=entry.held_until)
        self._publish(backend_id, keep=entry.held_until > now)
        log.info("breaker_closed", backend=backend_id, local=local)
        if local and self.on_transition is not None:
            self.on_transition(backend_id, False)

    def _open(self, backend_id: str, entry: _Entry, now: float, local: bool = True) -> None:
        entry.opened_at, entry.probes, entry.probe_successes = now, 0, 0
        entry.probe_cap = 0 if self._fleet_probes else None
        entry.window.clear()
        entry.failures = 0
        self._publish(backend_id)
        log.warning("breaker_opened", backend=backend_id, cooldown_s=self._config.cooldown_s,
                    local=local)
        if local and self.on_transition is not None:
            self.on_transition(backend_id, True)

    def _publish(self, backend_id: str, *, keep: bool = True) -> None:
        """Replace ``views`` with ``backend_id``'s current view (``keep`` False: closed and
        not held, so it leaves the views)."""
        views = dict(self._views)
        if keep:
            entry = self._entries[backend_id]
            cap = self._config.half_open_probes if entry.probe_cap is None else entry.probe_cap
            views[backend_id] = BreakerView(
                entry.opened_at, self._config.cooldown_s, entry.held_until, entry.probes < cap)
        else:
            views.pop(backend_id, None)
        self._views = MappingProxyType(views)
