"""Shared plumbing for scorers: read one backend's signals from the context, and turn a
column of values (aligned with the candidates, NaN where a signal is missing) into the
``{backend_id: score}`` map of the ``Scorer`` contract.

Scorers compute a *column* — one list pass over the candidates, no per-backend calls — and
derive ``score`` from it with ``ColumnScorer``; the profile reads the column directly
(``anchor/profile.py``), which is what keeps a decision over 100 backends well under a
millisecond (``bench/decide.py``). A scorer whose values come per backend (a map) derives
its column with ``MapScorer`` instead.

``reads_engine``: True for the scorers that read the polled engine/GPU signals
(``engine``/``engine_rows``). For a *dark* backend (``MetricsSnapshot.dark``: its poll is
down or its signals are stale) the profile's total counts their value as 0.0, the worst
score, instead of leaving it out and renormalising; the router-side scorers (in-flight,
latency, error rate, health, …) count as given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend, BackendStats, EngineSignals

T = TypeVar("T")

NAN = math.nan
"""The column value of a missing signal."""


def engine(ctx: AnchorContext, backend_id: str) -> EngineSignals | None:
    """The backend's fresh engine/GPU signals, or None when absent or stale."""
    return ctx.snapshot.engines.get(backend_id)


def stats(ctx: AnchorContext, backend_id: str) -> BackendStats:
    """The router's own stats for the backend (empty stats when never used)."""
    return ctx.snapshot.stats.get(backend_id) or BackendStats(backend_id)


def present(candidates: Sequence[Backend],
            value: Callable[[str], float | None]) -> dict[str, float]:
    """``{backend_id: value(id)}`` for every candidate whose value is not None."""
    out = {}
    for b in candidates:
        v = value(b.id)
        if v is not None:
            out[b.id] = v
    return out


def memo_column(ctx: AnchorContext, name: str, candidates: Sequence[Backend],
                compute: Callable[[AnchorContext, Sequence[Backend]], list[T]]) -> list[T]:
    """``compute(ctx, candidates)``, computed once per decision: kept in ``ctx.columns``
    under ``name`` for this very ``candidates`` sequence (identity; the memo holds it, so
    its id cannot be reused while the entry lives). Callers must not mutate the result."""
    key = (name, id(candidates))
    hit = ctx.columns.get(key)
    if hit is not None and hit[0] is candidates:
        return hit[1]
    column = compute(ctx, candidates)
    ctx.columns[key] = (candidates, column)
    return column


def engine_rows(ctx: AnchorContext, candidates: Sequence[Backend]
                ) -> list[EngineSignals | None]:
    """Each candidate's fresh engine signals (None: absent or stale), in order; looked up
    once per decision and shared by the scorers that read them (``memo_column``). Callers
    must not mutate the result."""
    return memo_column(ctx, "engine-rows", candidates, _engine_rows)


def stats_rows(ctx: AnchorContext, candidates: Sequence[Backend]
               ) -> list[BackendStats | None]:
    """Each candidate's router-side stats (None: not tracked), in order; looked up once per
    decision and shared like ``engine_rows``. Callers must not mutate the result."""
    return memo_column(ctx, "stats-rows", candidates, _stats_rows)


def _engine_rows(ctx: AnchorContext, candidates: Sequence[Backend]
                 ) -> list[EngineSignals | None]:
    get = ctx.snapshot.engines.get
    return [get(b.id) for b in candidates]


def _stats_rows(ctx: AnchorContext, candidates: Sequence[Backend]) -> list[BackendStats | None]:
    get = ctx.snapshot.stats.get
    return [get(b.id) for b in candidates]


def as_map(candidates: Sequence[Backend], column: list[float]) -> dict[str, float]:
    """``{backend_id: value}`` of a column, NaN (missing) left out."""
    return {b.id: x for b, x in zip(candidates, column) if not math.isnan(x)}


class ColumnScorer:
    """Base for scorers that compute ``column``; ``score`` is the column as a map."""

    name = "column"
    bounded = False
    """True when every value is NaN or inside [0, 1] by construction (the profile then
    checks a column for NaN only, not its range)."""
    reads_engine = False
    """True when the values come from the polled engine/GPU signals (module docstring)."""

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """One value per candidate, in order; NaN where the signal is missing."""
        raise NotImplementedError

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """``column`` as ``{backend_id: score}``, missing signals left out."""
        return as_map(candidates, self.column(ctx, candidates))


class MapScorer:
    """Base for scorers that compute ``score`` (a map); ``column`` lays it out in the
    candidates' order, NaN where a backend is left out."""

    name = "map"
    bounded = False
    """As ``ColumnScorer.bounded``."""
    reads_engine = False
    """As ``ColumnScorer.reads_engine``."""

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """``{backend_id: score}``, missing signals left out."""
        raise NotImplementedError

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """``score`` aligned with ``candidates``; NaN where the signal is missing."""
        part = self.score(ctx, candidates)
        get = part.get
        return [get(b.id, NAN) for b in candidates]
