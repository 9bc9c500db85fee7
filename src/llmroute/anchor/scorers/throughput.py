"""throughput: a backend that generates more output tokens per second is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import MapScorer, present, stats
from llmroute.types import Backend


class ThroughputScorer(MapScorer):
    """``own / best`` output tokens per second of generation time (router's window, tokens
    summed over generation seconds) among the candidates: the fastest scores 1.0. Missing
    for a backend without a measured rate."""

    name = "throughput"

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring."""
        rates = present(candidates, lambda bid: stats(ctx, bid).output_tps)
        best = max(rates.values(), default=0.0)
        return {bid: r / best for bid, r in rates.items()} if best > 0 else {}
