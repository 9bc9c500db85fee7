"""kv-balance: KV-cache usage relative to the other candidates — below the candidates' mean
is better. It evens usage across engines whose caches differ in size, where the absolute
``kv-cache`` score lets the engines with the largest caches look free for longest.

The usage compared is the one *after* placing this request where the engine reports its
cache size (``kv_capacity_tokens``, e.g. vLLM's ``cache_config_info``): the request's
footprint, ``prompt tokens + max_tokens / 2`` (its mean KV over a life that grows from the
prompt to prompt + output), is a share of that cache — 13 points of a 31k-token cache for a
4k prompt, one point of a 318k-token one — so long requests go where they move the usage
least. Without a known size the current usage is used.

The share is weighted by how long the request will hold it: by Little's law (Little, "A
Proof for the Queuing Formula L = λW", Operations Research 9(3), 1961) an engine's mean KV
occupancy is what it admits times how long each admission stays, and a request stays for
its output tokens × the engine's time per output token. So the share is multiplied by the
engine's TPOT (``tpot_p50_ms``) over the candidates' mean TPOT: an engine decoding three
times slower than the fleet counts a request three times. Without a TPOT the weight is 1.
In ``bench/schedule.py`` this took the two L4/8Bs (small caches, the slowest decode) from
running fullest towards the mean."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import ColumnScorer, engine_rows
from llmroute.anchor.scorers.kv_cache import KvCacheScorer
from llmroute.types import Backend, ChatRequest, EngineSignals

BAND = 0.10
"""Usage (fraction 0–1) above or below the mean at which the score reaches 0 or 1."""
HALF_SLOPE = 1 / (2 * BAND)


class KvBalanceScorer(ColumnScorer):
    """``0.5 + (mean usage − usage after) / (2 · BAND)``, clamped to [0, 1], where usage is
    ``1 − kv_free``, usage after adds ``footprint × tpot / mean tpot / kv_capacity_tokens``
    where the size is known (module docstring), and the mean is of the current usage over
    the candidates that report it; missing where the engine reports no usage."""

    name = "kv-balance"
    reads_engine = True
    bounded = True

    def __init__(self) -> None:
        self._free = KvCacheScorer()

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where the KV signal is missing."""
        free = self._free.column(ctx, candidates)  # the kv-cache column, once per decision
        mean = _mean_known(free)
        if mean is None:
            return list(free)
        # 0.5 + (mean usage - usage) / (2 BAND) = 0.5 + (free - mean free) * HALF_SLOPE;
        # a NaN (missing) fails both comparisons and stays NaN
        offset = 0.5 - HALF_SLOPE * mean
        engines = engine_rows(ctx, candidates)
        need = footprint(ctx.request)
        share = _share_per_tpot(need, engines)  # the request's KV need per TPOT ms
        # usage after = 1 - free + share x TPOT / size (need / size without a TPOT; nothing
        # without a size); the score folded into the same pass
        return [0.0 if (v := HALF_SLOPE * (
                    f - (share * t if (t := e.tpot_p50_ms) else need) / size
                    if e is not None and (size := e.kv_capacity_tokens) else f) + offset) < 0.0
                else 1.0 if v > 1.0 else v for e, f in zip(engines, free)]


def footprint(request: ChatRequest) -> float:
    """KV tokens a request holds on average over its life: ``prompt + max_tokens / 2``
    (tokens; no ``max_tokens`` counts the prompt only)."""
    return max(request.prompt_tokens, 1) + (request.max_tokens or 0) / 2


def _mean_known(column: list[float]) -> float | None:
    """The mean of the non-NaN values (None: all NaN or empty). A column without a NaN —
    the common case, told by its C-level ``sum`` — takes no Python pass."""
    total = sum(column)
    if total == total:  # no NaN (NaN != NaN)
        return total / len(column) if column else None
    known = [x for x in column if x == x]
    return sum(known) / len(known) if known else None


def _share_per_tpot(need: float, engines: list[EngineSignals | None]) -> float:
    """``need / mean TPOT`` over the engines that report a TPOT (``need``: the request's
    ``footprint``, tokens; result in tokens per ms, ``need`` itself when no engine reports
    one): times an engine's TPOT, the request's weighted KV need there (module docstring)."""
    try:  # the common case: every engine reports a TPOT (one pass, no filtering)
        tpots = [e.tpot_p50_ms for e in engines]  # AttributeError: no signals (None)
        total = sum(tpots)  # TypeError: a TPOT is None
        if total > 0 and min(tpots) > 0:
            return need * len(tpots) / total
    except (AttributeError, TypeError):
        pass
    known = [t for e in engines if e is not None and (t := e.tpot_p50_ms)]
    return need * len(known) / sum(known) if known else need
