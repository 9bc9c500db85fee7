"""prefix-affinity: the backend that recently served this prompt's prefix is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import MapScorer
from llmroute.types import Backend


class PrefixAffinityScorer(MapScorer):
    """Matched leading blocks / prompt blocks (0–1) per backend, from the ``PrefixIndex``
    (see ``anchor/affinity.py``); 0.0 for a backend that served none of them. Missing for
    every backend when the prompt is shorter than one block."""

    name = "prefix-affinity"

    def __init__(self, index: PrefixIndex):
        self._index = index

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring."""
        keys = self._index.keys(ctx.request.text)
        if not keys:
            return {}
        depth = self._index.matched_blocks(keys, ctx.now)
        return {b.id: depth.get(b.id, 0) / len(keys) for b in candidates}
