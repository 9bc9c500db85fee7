"""gpu-util: an idler GPU is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import MapScorer, engine, present
from llmroute.types import Backend


class GpuUtilScorer(MapScorer):
    """``1 - gpu_util`` (NVML/DCGM utilisation, fraction 0–1 of time a kernel ran): the idle
    share. Missing without a fresh GPU reading."""

    name = "gpu-util"
    reads_engine = True

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring."""
        def value(bid: str) -> float | None:
            e = engine(ctx, bid)
            return None if e is None or e.gpu_util is None else 1.0 - e.gpu_util
        return present(candidates, value)
