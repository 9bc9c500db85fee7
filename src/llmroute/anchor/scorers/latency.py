"""latency: a backend whose recent p95 is close to its own unloaded baseline is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import NAN, ColumnScorer, stats_rows
from llmroute.types import Backend, BackendStats


def latency_ratio(s: BackendStats) -> float | None:
    """``baseline / p95`` capped at 1, over TTFT when the window has TTFT samples (streams),
    else over end-to-end latency; None before the backend has both (see
    ``anchor/sources/router.py`` for the window and the baseline)."""
    p95, base = s.ttft_p95_ms, s.ttft_baseline_ms
    if p95 is None or base is None:
        p95, base = s.latency_p95_ms, s.latency_baseline_ms
        if p95 is None or base is None:
            return None
    ratio = base / (p95 if p95 > 1e-3 else 1e-3)
    return ratio if ratio < 1.0 else 1.0


class LatencyScorer(ColumnScorer):
    """``latency_ratio`` of the router's sliding-window stats: 1.0 while the backend answers
    as fast as it does unloaded, 0.5 when its p95 is twice its baseline. Missing until the
    backend has a baseline (five successful requests)."""

    name = "latency"

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where missing."""
        out = []
        for s in stats_rows(ctx, candidates):
            r = None if s is None else latency_ratio(s)
            out.append(NAN if r is None else r)
        return out
