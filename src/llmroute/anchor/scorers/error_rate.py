"""error-rate: a backend whose recent requests failed less is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import MapScorer, present, stats
from llmroute.types import Backend


class ErrorRateScorer(MapScorer):
    """``1 - window_error_rate`` (failed fraction of the requests that ended in the router's
    sliding window). Missing while the window is empty."""

    name = "error-rate"

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring."""
        def value(bid: str) -> float | None:
            rate = stats(ctx, bid).window_error_rate
            return None if rate is None else 1.0 - rate
        return present(candidates, value)
