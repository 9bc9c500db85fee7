"""network: the backend the router reaches fastest is better (seed 000's 0.2 · net term).

The router times its own polls of each engine (``anchor/sources/http.py``: the time to the
response headers, ``net_rtt_ms``, and the body's bytes per second, ``net_bytes_per_s``;
the store keeps the median of the last five), so a link that slows shows here within a few
poll intervals and costs no extra probe. The score is relative to the candidates, as
``expected-ttft`` is: ``½ · rtt part + ½ · bytes/s part``, each in [0, 1]; a backend with
only one reading is scored on that one. A part is 1.0 within ``TOLERANCE`` of the best
candidate (a median of five timings on a busy event loop still moves by tens of per cent
between links that are alike, and a weighted term would herd traffic onto whichever reads
fastest), else it falls in proportion: ``TOLERANCE · best RTT / own RTT`` and ``TOLERANCE ·
own bytes/s / best bytes/s`` — a link five times slower than the best scores 0.3.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import NAN, ColumnScorer, engine_rows
from llmroute.types import Backend

MIN_RTT_MS = 0.05
"""Floor of the best RTT (ms), so a loopback reading of ~0 does not divide by zero."""
TOLERANCE = 1.5
"""Readings within this factor of the best candidate's count as the best (module
docstring)."""


class NetworkScorer(ColumnScorer):
    """See the module docstring; NaN for a backend with neither reading fresh."""

    name = "network"
    bounded = True
    reads_engine = True

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the module docstring; NaN where missing."""
        rows = engine_rows(ctx, candidates)
        rtts = [None if e is None else e.net_rtt_ms for e in rows]
        rates = [None if e is None else e.net_bytes_per_s for e in rows]
        fastest = min((r for r in rtts if r is not None), default=None)
        widest = max((r for r in rates if r is not None), default=None)
        return [_score(rtt, rate, fastest, widest) for rtt, rate in zip(rtts, rates)]


def _score(rtt: float | None, rate: float | None, fastest: float | None,
           widest: float | None) -> float:
    parts = []
    if rtt is not None and fastest is not None:
        best = max(fastest, MIN_RTT_MS)
        parts.append(min(TOLERANCE * best / max(rtt, best), 1.0))
    if rate is not None and widest:
        parts.append(min(TOLERANCE * rate / widest, 1.0))
    return sum(parts) / len(parts) if parts else NAN
