"""Contracts of the anchor's plugins (DESIGN.md §4): filters, scorers and pickers are pure
and synchronous; a metrics source is the one that does I/O (polled by the collector)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmroute.types import Backend, ChatRequest, EngineSignals, Intent, MetricsSnapshot


@dataclass(frozen=True, slots=True)
class AnchorContext:
    """Everything a filter or scorer may read: the request, its intent, the signals (fresh
    only: a stale signal is absent), the time (s), and the ``pools`` the plan allows (None:
    any). ``columns`` is a per-decision memo (``scorers/base.memo_column``): a column two
    scorers read (``kv-cache`` and ``kv-balance``; each candidate's engine signals and
    stats, ``engine_rows``/``stats_rows``) is computed once per decision; it starts
    empty with every context (``dataclasses.replace`` too), so it never outlives the signals
    it came from."""

    request: ChatRequest
    intent: Intent
    snapshot: MetricsSnapshot
    now: float
    pools: frozenset[str] | None = None
    columns: dict[tuple[str, int], tuple[object, list[Any]]] = field(
        default_factory=dict, init=False, repr=False, compare=False)


class Filter(Protocol):
    """Drops backends that must not serve; returns a subset of ``candidates``, order kept."""

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]: ...


class Scorer(Protocol):
    """Scores each candidate in [0, 1], higher is better. Scorers hold no weights: the
    profile multiplies by the configured weight.

    - ``column(ctx, candidates) -> list[float]``: one value per candidate, in order, NaN
      where the backend's signal is missing or stale (the profile then renormalises the
      weights over that backend's present signals, unless the backend is dark). The
      profile reads this: one list pass per scorer (``anchor/profile.py``).
    - ``score(ctx, candidates) -> {backend_id: score}``: the same values as a map, missing
      signals left out (reports and tests read this).
    - ``bounded``: True when every ``column`` value is NaN or inside [0, 1] by construction
      (the profile then checks a column for NaN only, not its range).
    - ``reads_engine``: True when the values come from the polled engine/GPU signals; for a
      dark backend (``MetricsSnapshot.dark``) the profile's total counts 0.0, the worst
      score, in their place (``anchor/profile.py``). Optional: absent means False.

    ``scorers/base.py`` gives both methods from either one: ``ColumnScorer`` (implement
    ``column``) and ``MapScorer`` (implement ``score``)."""

    name: str
    bounded: bool

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]: ...

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]: ...


class Picker(Protocol):
    """Orders backends from ``{backend_id: total score}``: first = chosen, rest = fallback.
    Returns every key exactly once (non-empty when ``scored`` is). ``name`` is its
    registered type name (``argmax``, ``p2c``, …), as ``/debug/backends`` shows it."""

    name: str

    def pick(self, scored: dict[str, float]) -> list[str]: ...


class MetricsSource(Protocol):
    """One backend's engine/GPU signals (``types.EngineSignals``) taken at ``now`` (the
    caller's clock, s), fetched and parsed: ``anchor/sources/``. Raises SignalSourceError
    when the endpoint cannot be read, never anything else; a body that does not parse is a
    snapshot with its signals missing. The collector owns the schedule and timeouts."""

    async def poll(self, backend: Backend, now: float) -> EngineSignals: ...
