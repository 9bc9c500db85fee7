"""expected-ttft: the backend expected to give this request its first token soonest is best.

Per backend, the router's TTFT model (``anchor/sources/prefill.py``) predicts
``TTFT = overhead + (prompt tokens already waiting there + this prompt) × ms/token``. Unlike
counting requests (``in-flight``, ``queue-depth``), it weighs each queued prompt by its
length and each engine by its own speed, so a long prompt goes to a fast engine with a short
queue rather than to the slow engine that happens to be idle. With prefix pricing on
(``anchor/prefix.py``: the profile has a ``prefix-affinity`` scorer) this prompt counts
only its part the backend is not expected to have cached, so a cache hit shortens the
prediction by the prefill it saves — and no more: a queue that costs more still loses.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.prefix import Affinity
from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import NAN, ColumnScorer, memo_column, stats_rows
from llmroute.types import Backend, BackendStats


def expected_ttft_ms(s: BackendStats | None, prompt_tokens: int) -> float | None:
    """The predicted TTFT (ms) of a ``prompt_tokens`` prompt sent to the backend now; None
    before its model is fitted."""
    if s is None or s.prefill_ms_per_token is None:
        return None
    overhead = s.prefill_overhead_ms or 0.0
    return overhead + (s.prefill_tokens + max(prompt_tokens, 1)) * s.prefill_ms_per_token


def predicted_ttfts(ctx: AnchorContext, candidates: Sequence[Backend],
                    affinity: Affinity | None = None) -> list[float]:
    """Predicted TTFT (ms) of ``ctx.request`` on each candidate, in order (``expected_ttft_ms``;
    with ``affinity`` pricing, of the prompt's tokens each one is not expected to hold).
    A backend without a fitted model (no first token seen yet) is predicted optimistically,
    as fast per token as the fastest known one with no overhead, so every backend gets
    tried and learned; with no model at all every value is NaN. Computed once per decision
    and candidate list (``memo_column``): the ``ttft-headroom`` filter and this scorer share
    it. Callers must not mutate the result."""
    if affinity is not None and affinity.pricing:
        return memo_column(ctx, PREDICTED, candidates,
                           lambda c, b: _predict_uncached(c, b, affinity))
    return memo_column(ctx, PREDICTED, candidates, _predict)


PREDICTED = "predicted-ttft"
"""The ``ctx.columns`` memo key of ``predicted_ttfts``."""


def _predict(ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
    prompt, stats = max(ctx.request.prompt_tokens, 1), stats_rows(ctx, candidates)
    try:  # the common case: every candidate has a fitted model (one pass)
        # expected_ttft_ms inlined: a call per backend costs ~40 % more at 100 backends
        return [(s.prefill_overhead_ms or 0.0)
                + (s.prefill_tokens + prompt) * s.prefill_ms_per_token for s in stats]
    except (AttributeError, TypeError):  # no stats (None) or no model (rate None)
        partial = _with_unknowns(stats, prompt)
        return [NAN] * len(stats) if partial is None else partial


def _predict_uncached(ctx: AnchorContext, candidates: Sequence[Backend],
                      affinity: Affinity) -> list[float]:
    """``_predict``, less for each candidate the prefill of the tokens it is expected to
    hold (``overhead + (pending + max(prompt − cached, 1)) × rate``)."""
    cached = affinity.cached_tokens(ctx, candidates)
    times = _predict(ctx, candidates)
    if not any(cached) or times[0] != times[0]:  # nothing cached, or no model at all
        return times
    prompt = max(ctx.request.prompt_tokens, 1)
    stats = stats_rows(ctx, candidates)
    known = [s.prefill_ms_per_token for s in stats
             if s is not None and s.prefill_ms_per_token is not None]
    fastest = min(known)
    times = list(times)  # the memoised plain column is not ours to change
    for i, c in enumerate(cached):
        if c:
            s = stats[i]
            rate = s.prefill_ms_per_token if s is not None else None
            times[i] -= (prompt - max(prompt - int(c), 1)) * (rate if rate is not None
                                                              else fastest)
    return times


class ExpectedTtftScorer(ColumnScorer):
    """``best / own`` predicted TTFT among the candidates (``predicted_ttfts``): 1.0 for the
    soonest, 0.5 for a backend expected to take twice as long; missing when no backend has
    a model yet."""

    name = "expected-ttft"
    bounded = True

    def __init__(self, affinity: Affinity | None = None):
        self._affinity = affinity

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where missing."""
        times = predicted_ttfts(ctx, candidates, self._affinity)
        if not times or times[0] != times[0]:  # empty, or no model anywhere (all NaN)
            return list(times)
        best = max(min(times), 1e-3)
        return [best / t if t > best else 1.0 for t in times]


def _with_unknowns(stats: list[BackendStats | None], prompt: int) -> list[float] | None:
    """Predicted TTFTs (ms) when some backend has no model: those are predicted at the
    fastest known rate with no overhead (``_unknown``); None when no backend has a model."""
    rates = [None if s is None else s.prefill_ms_per_token for s in stats]
    known = [r for r in rates if r is not None]
    if not known:
        return None
    fastest = min(known)
    return [(s.prefill_overhead_ms or 0.0) + (s.prefill_tokens + prompt) * r
            if r is not None else _unknown(s, prompt) * fastest
            for s, r in zip(stats, rates)]


def _unknown(s: BackendStats | None, prompt_tokens: int) -> int:
    """Tokens ahead on a backend without a model: its pending prompts plus this one."""
    return prompt_tokens + (s.prefill_tokens if s is not None else 0)
