"""kv-balance: KV-cache usage relative to the other candidates — below the candidates' mean
is better. It evens usage across engines whose caches differ in size, where the absolute
``kv-cache`` score lets the engines with the largest caches look free for longest."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import ColumnScorer
from llmroute.anchor.scorers.kv_cache import KvCacheScorer
from llmroute.types import Backend

BAND = 0.10
"""Usage (fraction 0–1) above or below the mean at which the score reaches 0 or 1."""
HALF_SLOPE = 1 / (2 * BAND)


class KvBalanceScorer(ColumnScorer):
    """``0.5 + (mean usage − usage) / (2 · BAND)``, clamped to [0, 1], where usage is
    ``1 − kv_free`` and the mean is over the candidates that report it; missing otherwise."""

    name = "kv-balance"
    bounded = True

    def __init__(self) -> None:
        self._free = KvCacheScorer()

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where the KV signal is missing."""
        free = self._free.column(ctx, candidates)  # the kv-cache column, once per decision
        known = [f for f in free if f == f]  # NaN != NaN
        if not known:
            return list(free)
        # 0.5 + (mean usage - usage) / (2 BAND) = 0.5 + (free - mean free) * HALF_SLOPE;
        # a NaN (missing) fails both comparisons and stays NaN
        offset = 0.5 - HALF_SLOPE * sum(known) / len(known)
        return [0.0 if (v := HALF_SLOPE * f + offset) < 0.0 else 1.0 if v > 1.0 else v
                for f in free]
