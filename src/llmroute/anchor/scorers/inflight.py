"""in-flight: fewer requests already running on a backend (router's own count) is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import ColumnScorer, stats_rows
from llmroute.types import Backend


class InFlightScorer(ColumnScorer):
    """``1 / (1 + in_flight)``: 1.0 for an idle backend, 0.5 with one request running, …
    Always present: the router's own counter is never stale."""

    name = "in-flight"
    bounded = True

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring."""
        return [1.0 if s is None else 1.0 / (1.0 + s.in_flight)
                for s in stats_rows(ctx, candidates)]
