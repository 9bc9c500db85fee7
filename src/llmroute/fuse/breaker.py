"""Per-backend circuit breaker: closed → open → half-open → closed.

Closed: requests flow; ``failure_threshold`` consecutive failures open it. Open: no
requests for ``cooldown_s`` seconds. Half-open: requests are allowed as probes; a success
closes the breaker, a failure re-opens it for another cool-down. Pure state over an injected
clock (``now`` in seconds); the pipeline records outcomes.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmroute.config import BreakerConfig
from llmroute.types import BreakerState, Outcome


@dataclass(frozen=True, slots=True)
class _Entry:
    failures: int = 0
    opened_at: float | None = None


class CircuitBreaker:
    """Breakers for a set of backends (keyed by backend id)."""

    def __init__(self, config: BreakerConfig):
        self._config = config
        self._entries: dict[str, _Entry] = {}

    def state(self, backend_id: str, now: float) -> BreakerState:
        """The breaker's state for ``backend_id`` at ``now``."""
        entry = self._entries.get(backend_id, _Entry())
        if entry.opened_at is None:
            return BreakerState.CLOSED
        if now - entry.opened_at >= self._config.cooldown_s:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def allow(self, backend_id: str, now: float) -> bool:
        """True when a request may be sent (closed, or half-open as a probe)."""
        return self.state(backend_id, now) is not BreakerState.OPEN

    def record(self, backend_id: str, outcome: Outcome, now: float) -> None:
        """Count one attempt's outcome; may open or close the breaker."""
        if outcome is Outcome.SUCCESS:
            self._entries[backend_id] = _Entry()
            return
        entry = self._entries.get(backend_id, _Entry())
        failures = entry.failures + 1
        half_open = self.state(backend_id, now) is BreakerState.HALF_OPEN
        opens = half_open or failures >= self._config.failure_threshold
        self._entries[backend_id] = _Entry(failures, now if opens else entry.opened_at)
