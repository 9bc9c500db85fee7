"""Thermal: no new requests to a GPU that runs too hot while another backend can take them.

The store's thermal latch (``anchor/readings.py``: at or above the limit, 78 °C by
default, a GPU is hot until it cools 3 °C below it) puts the hot backends in
``MetricsSnapshot.hot``; this filter drops them — unless that would drop every candidate,
when it keeps them all (a hot GPU still serves rather than nobody). A backend without a
temperature reading is never hot.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend


class ThermalFilter:
    """Keeps the backends not in ``ctx.snapshot.hot``, or every candidate when all are hot."""

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept; with no hot GPU (the common case) the
        list as is."""
        hot = ctx.snapshot.hot
        if not hot:
            return list(candidates)
        kept = [b for b in candidates if b.id not in hot]
        return kept or list(candidates)
