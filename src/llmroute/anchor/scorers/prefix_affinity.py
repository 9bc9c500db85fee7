"""prefix-affinity: the backend expected to hold more of this prompt in its prefix cache is
better (GIE's ``prefix-cache-scorer``: matched blocks over the prompt's blocks) — but only
where that hit is not bought with a longer wait."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.prefix import Affinity
from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import NAN, ColumnScorer, stats_rows
from llmroute.anchor.scorers.expected_ttft import predicted_ttfts
from llmroute.types import Backend

MARGIN = 1.1
"""A holder keeps its credit while its predicted TTFT is at most this × the soonest."""


class PrefixAffinityScorer(ColumnScorer):
    """Expected cached tokens over the prompt's tokens (0–1) per backend, from the
    ``Affinity`` (``anchor/prefix.py``: the router's own index scaled by the engine's
    confirmed hit rate, or the engine's KV events); 0.0 for a backend holding none of it.

    ``priced`` (the default): a backend whose predicted TTFT — its prefill priced on the
    tokens it has *not* cached (``expected_ttft.predicted_ttfts``) — is more than
    ``MARGIN`` × the soonest candidate's gets no credit. Its hit saves less than its queue
    costs, so the hit must not pull the request there: a cache hit never outweighs a queue
    that costs more than the prefill it saves (up to the margin). Before any backend has a
    TTFT model, the uncached prompt tokens queued on each stand in for its TTFT (a burst of
    one new prefix spreads instead of piling onto its first holder). Missing for every backend when the prompt is shorter than one
    block and no engine publishes events."""

    name = "prefix-affinity"
    bounded = True

    def __init__(self, affinity: Affinity, priced: bool = True):
        self._affinity = affinity
        self._priced = priced

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where missing."""
        cached = self._affinity.cached_tokens(ctx, candidates)
        prompt = ctx.request.prompt_tokens
        if prompt <= 1 or not any(cached) and not self._affinity.keys(ctx.request):
            return [NAN] * len(candidates)
        shares = [min(c / prompt, 1.0) for c in cached]
        if not self._priced or not any(shares):
            return shares
        times = predicted_ttfts(ctx, candidates, self._affinity)
        if min(times) != min(times):  # no TTFT model yet: compare the prefill queued
            times = _tokens_ahead(ctx, candidates, cached)
        limit = MARGIN * min(times)
        return [x if t <= limit else 0.0 for x, t in zip(shares, times)]


def _tokens_ahead(ctx: AnchorContext, candidates: Sequence[Backend],
                  cached: list[float]) -> list[float]:
    """Uncached prompt tokens each candidate must prefill before this request's first token
    (its pending prefill plus this prompt's uncached part): the TTFT ranking of alike
    engines before any has a TTFT model."""
    prompt = ctx.request.prompt_tokens
    return [(s.prefill_tokens if s is not None else 0) + max(prompt - c, 1)
            for s, c in zip(stats_rows(ctx, candidates), cached)]
