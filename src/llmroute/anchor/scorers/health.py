"""health: the circuit breaker's view as a score."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import ColumnScorer
from llmroute.types import Backend, BreakerState

STATE_SCORE = {BreakerState.CLOSED: 1.0, BreakerState.HALF_OPEN: 0.5, BreakerState.OPEN: 0.0}
"""Closed 1.0, half-open (probing) 0.5, open 0.0."""


class HealthScorer(ColumnScorer):
    """``STATE_SCORE`` of the backend's breaker view (``ctx.snapshot.breakers``; absent:
    closed) at ``ctx.now``; always present."""

    name = "health"
    bounded = True

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring."""
        views = ctx.snapshot.breakers
        if not views:
            return [1.0] * len(candidates)
        get, now = views.get, ctx.now
        return [1.0 if (v := get(b.id)) is None else STATE_SCORE[v.state(now)]
                for b in candidates]
