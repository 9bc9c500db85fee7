"""in-flight: fewer requests already running on a backend (router's own count) is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend


class InFlightScorer:
    """``1 / (1 + in_flight)``: 1.0 for an idle backend, 0.5 with one request running, …
    Always present: the router's own counter is never stale."""

    name = "in-flight"

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring."""
        stats = ctx.snapshot.stats
        return {b.id: 1.0 / (1.0 + _in_flight(stats, b.id)) for b in candidates}


def _in_flight(stats: dict, backend_id: str) -> int:
    s = stats.get(backend_id)
    return s.in_flight if s is not None else 0
