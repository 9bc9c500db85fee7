"""mem-bandwidth: a GPU whose memory interface has headroom is better.

Decode is bound by reading the weights and the KV cache (the roofline of
``emulator/perf.py``), so an engine whose memory interface is busy nearly all the time
(DCGM ``DRAM_ACTIVE`` near 1: seed 002 §2.2's memory-bandwidth-bound engine) slows every
sequence it adds; one with headroom decodes a new one nearly for free.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import NAN, ColumnScorer, engine_rows
from llmroute.types import Backend


class MemBandwidthScorer(ColumnScorer):
    """``1 − gpu_mem_bw_util`` (fraction 0–1 of time the memory interface was busy, DCGM or
    NVML). Missing without a fresh reading."""

    name = "mem-bandwidth"
    bounded = True
    reads_engine = True

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where missing."""
        return [NAN if e is None or e.gpu_mem_bw_util is None else 1.0 - e.gpu_mem_bw_util
                for e in engine_rows(ctx, candidates)]
