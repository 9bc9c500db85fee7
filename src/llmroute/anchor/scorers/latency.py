"""latency: a backend whose recent latency is lower than its peers' scores higher."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend


class LatencyScorer:
    """``best / own`` over the EWMA end-to-end latency per output request (ms).

    The fastest known backend scores 1.0; a backend with no sample yet also scores 1.0 so
    it gets tried (optimism under uncertainty).
    """

    name = "latency"

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        known = {b.id: _latency(ctx, b.id) for b in candidates}
        values = [v for v in known.values() if v is not None]
        best = min(values) if values else None
        return {bid: 1.0 if v is None or best is None else best / v for bid, v in known.items()}


def _latency(ctx: AnchorContext, backend_id: str) -> float | None:
    s = ctx.snapshot.stats.get(backend_id)
    if s is None or s.latency_ms is None:
        return None
    return max(s.latency_ms, 1e-3)
