"""health: the circuit breaker's view as a score."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.types import Backend, BreakerState

STATE_SCORE = {BreakerState.CLOSED: 1.0, BreakerState.HALF_OPEN: 0.5, BreakerState.OPEN: 0.0}
"""Closed 1.0, half-open (probing) 0.5, open 0.0."""


class HealthScorer:
    """``STATE_SCORE`` of the backend's breaker at ``ctx.now``; always present."""

    name = "health"

    def __init__(self, breaker: CircuitBreaker):
        self._breaker = breaker

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring."""
        return {b.id: STATE_SCORE[self._breaker.state(b.id, ctx.now)] for b in candidates}
