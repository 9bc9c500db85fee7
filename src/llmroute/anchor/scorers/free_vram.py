"""free-vram: a GPU with more free framebuffer memory is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import MapScorer, engine, present
from llmroute.types import Backend


class FreeVramScorer(MapScorer):
    """``free / (free + used)`` framebuffer bytes (NVML or DCGM), a fraction 0–1. Missing
    when the backend has no GPU source or its reading is stale."""

    name = "free-vram"
    reads_engine = True

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring."""
        def value(bid: str) -> float | None:
            e = engine(ctx, bid)
            if e is None or e.gpu_mem_free_bytes is None or e.gpu_mem_used_bytes is None:
                return None
            total = e.gpu_mem_free_bytes + e.gpu_mem_used_bytes
            return e.gpu_mem_free_bytes / total if total > 0 else None
        return present(candidates, value)
