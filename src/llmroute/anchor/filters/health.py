"""Health: drop backends whose circuit breaker does not allow a request now."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.types import Backend, BreakerState


class HealthFilter:
    """Keeps backends the breaker allows at ``ctx.now``. If the breaker would drop every
    candidate, keeps them all (ordered as given) so the request still gets an attempt."""

    def __init__(self, breaker: CircuitBreaker):
        self._breaker = breaker

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept. A closed breaker allows (one call per
        backend, the common case); any other state asks ``allow`` (half-open probes)."""
        state, allow, now = self._breaker.state, self._breaker.allow, ctx.now
        closed = BreakerState.CLOSED
        allowed = [b for b in candidates if state(b.id, now) is closed or allow(b.id, now)]
        return allowed or list(candidates)
