"""prefix-affinity: the backend expected to hold more of this prompt in its prefix cache is
better (GIE's ``prefix-cache-scorer``: matched blocks over the prompt's blocks)."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.prefix import Affinity
from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import ColumnScorer
from llmroute.types import Backend


class PrefixAffinityScorer(ColumnScorer):
    """Expected cached tokens over the prompt's tokens (0–1) per backend, from the
    ``Affinity`` (``anchor/prefix.py``: the router's own index scaled by the engine's
    confirmed hit rate, or the engine's KV events); 0.0 for a backend holding none of it.
    Missing for every backend when the prompt is shorter than one block and no engine
    publishes events."""

    name = "prefix-affinity"
    bounded = True

    def __init__(self, affinity: Affinity):
        self._affinity = affinity

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where missing."""
        cached = self._affinity.cached_tokens(ctx, candidates)
        prompt = ctx.request.prompt_tokens
        if prompt <= 1 or not any(cached) and not self._affinity.keys(ctx.request):
            return [float("nan")] * len(candidates)
        return [min(c / prompt, 1.0) for c in cached]
