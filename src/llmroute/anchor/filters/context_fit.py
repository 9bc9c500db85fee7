"""Context fit: prompt tokens + the output tokens the request carries to the backend must
fit its context, and under KV-cache pressure the usable context shrinks."""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.backends.quirks import carried_budget
from llmroute.types import Backend


def usable_context(context_length: int, kv_usage: float | None, threshold: float = 0.8,
                   min_fraction: float = 0.5) -> int:
    """Tokens a new request may use on a backend whose KV cache is ``kv_usage`` full (0–1).

    Up to ``threshold`` the whole window; above it the window shrinks linearly to
    ``min_fraction`` of it at a full cache: a long prompt on a nearly full cache would be
    queued or preempt running sequences, so it should go where the cache has room.
    Unknown usage (None) shrinks nothing.
    """
    if kv_usage is None or kv_usage <= threshold:
        return context_length
    pressure = min((kv_usage - threshold) / (1.0 - threshold), 1.0)
    return int(context_length * (1.0 - (1.0 - min_fraction) * pressure))


class ContextFitFilter:
    """Keeps backends with ``prompt_tokens + max_tokens ≤ context_length`` (tokens; the
    ``max_tokens`` the request carries to that backend: ``quirks.carried_budget``); among
    them, prefers those where it also fits the KV-pressure ``usable_context`` (fresh KV
    usage from ``ctx.snapshot.engines``). When pressure would drop every backend that fits,
    those are kept (pressure passes; a refusal would not). Without ``max_tokens`` the
    request needs ``min_output_tokens`` of room (default 16)."""

    def __init__(self, min_output_tokens: int = 16, kv_threshold: float = 0.8,
                 kv_min_fraction: float = 0.5):
        self._min_output = min_output_tokens
        self._threshold = kv_threshold
        self._min_fraction = kv_min_fraction

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept (empty: nothing fits at all)."""
        need = ctx.request.prompt_tokens + (ctx.request.max_tokens or self._min_output)
        # fast path: a request that fits every window at any pressure (one pass)
        anywhere = need / self._min_fraction if self._min_fraction > 0 else math.inf
        easy = [b for b in candidates if anywhere <= b.context_length]
        if len(easy) == len(candidates):
            return easy
        needs = [self._need(ctx, b) for b in candidates]
        fits = [(b, n) for b, n in zip(candidates, needs) if n <= b.context_length]
        roomy = [b for b, n in fits
                 if n <= b.context_length * self._min_fraction  # fits at any pressure
                 or n <= self._usable(ctx, b)]
        return roomy or [b for b, _ in fits]

    def _need(self, ctx: AnchorContext, b: Backend) -> int:
        """Prompt tokens plus the output budget the request carries to ``b`` (the smaller
        one for an engine that reads ``max_tokens`` alone: ``quirks.carried_budget``)."""
        return ctx.request.prompt_tokens + (carried_budget(ctx.request, b) or self._min_output)

    def _usable(self, ctx: AnchorContext, b: Backend) -> int:
        e = ctx.snapshot.engines.get(b.id)
        kv = e.kv_cache_usage if e is not None else None
        return usable_context(b.context_length, kv, self._threshold, self._min_fraction)
