"""kv-balance: KV-cache usage relative to the other candidates — below the candidates' mean
is better. It evens usage across engines whose caches differ in size, where the absolute
``kv-cache`` score lets the engines with the largest caches look free for longest."""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import NAN, ColumnScorer
from llmroute.anchor.scorers.kv_cache import kv_free
from llmroute.types import Backend

BAND = 0.10
"""Usage (fraction 0–1) above or below the mean at which the score reaches 0 or 1."""


class KvBalanceScorer(ColumnScorer):
    """``0.5 + (mean usage − usage) / (2 · BAND)``, clamped to [0, 1], where usage is
    ``1 − kv_free`` and the mean is over the candidates that report it; missing otherwise."""

    name = "kv-balance"

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where the KV signal is missing."""
        get = ctx.snapshot.engines.get
        usage = [NAN if (f := kv_free(get(b.id))) is None else 1.0 - f for b in candidates]
        known = [u for u in usage if not math.isnan(u)]
        if not known:
            return usage
        mean = sum(known) / len(known)
        return [u if math.isnan(u) else min(max(0.5 + (mean - u) / (2 * BAND), 0.0), 1.0)
                for u in usage]
