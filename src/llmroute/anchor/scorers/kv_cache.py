"""kv-cache: more free KV cache is better (fewer preemptions, room for long prompts)."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import NAN, ColumnScorer, engine_rows, memo_column
from llmroute.types import Backend, EngineSignals


def kv_free(e: EngineSignals | None) -> float | None:
    """Free KV fraction 0–1: ``1 - kv_cache_usage``; for llama.cpp builds without the KV
    gauge, the idle share of its slots (each slot owns ``ctx_size / slots`` tokens of the
    cache, so busy slots / total slots is the share of cache claimed). None when neither."""
    if e is None:
        return None
    if e.kv_cache_usage is not None:
        return 1.0 - e.kv_cache_usage
    if e.idle_slots is not None and e.total_slots:
        return min(e.idle_slots / e.total_slots, 1.0)
    return None


class KvCacheScorer(ColumnScorer):
    """``kv_free`` of the backend's fresh signals (see ``kv_free``); missing otherwise."""

    name = "kv-cache"
    reads_engine = True

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where missing. Computed once per decision
        (``memo_column``): ``kv-balance`` reads the same column. Do not mutate it."""
        return memo_column(ctx, self.name, candidates, _free_column)


def _free_column(ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
    return [1.0 - u if e is not None and (u := e.kv_cache_usage) is not None
            else _nan_if_none(kv_free(e)) for e in engine_rows(ctx, candidates)]


def _nan_if_none(x: float | None) -> float:
    return NAN if x is None else x
