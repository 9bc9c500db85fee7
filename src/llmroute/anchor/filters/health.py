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
        """A subset of ``candidates``, order kept. Only backends the breaker has flagged
        (opened or held since last closed) are asked ``state``/``allow``; the rest are
        closed — the common case costs one set lookup per backend."""
        flagged = self._breaker.flagged
        if not flagged:
            return list(candidates)
        state, allow, now = self._breaker.state, self._breaker.allow, ctx.now
        closed = BreakerState.CLOSED
        allowed = [b for b in candidates if b.id not in flagged
                   or state(b.id, now) is closed or allow(b.id, now)]
        return allowed or list(candidates)
