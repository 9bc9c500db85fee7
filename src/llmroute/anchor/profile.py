"""The anchor's profile: filters → weighted scorers → picker → ordered candidates.

Total score of a backend, from the scorers ``s`` with weight ``w`` and clamped score
``x ∈ [0, 1]`` (higher is better):

- a positive weight contributes ``w · x``;
- a negative weight is a *penalty on the complement*: it contributes ``w · (1 − x)``, i.e.
  ``−|w|`` times how bad the backend is on that signal. Seed 000's ``− 0.1 · queue`` is
  thus ``−0.1 · (1 − queue-depth score)``, the queue load itself, and the total ranges
  over ``[Σ negative w, Σ positive w]``. (Ordering-wise this equals ``|w| · x`` minus a
  constant, so a negative weight never rewards load.)
- **Missing signals.** A scorer leaves out a backend whose signal is missing (the engine
  does not expose it, or has not measured it yet). The backend's total is then computed
  over the scorers it has and renormalised:
  ``Σ_present c_s · (Σ_all |w|) / (Σ_present |w|)``, so a backend is never ranked by a
  zero that stands for "unknown", and backends with different gaps stay comparable.
  A backend with no signal at all gets the neutral mid-point ``Σ w / 2``. The router's own
  counters (in-flight, breaker) are always present, so with any of them in the mix the
  decision is never a coin toss.
- **Dark backends: stale signals or a down poll.** A backend in ``snapshot.dark`` (the
  collector's last poll failed — refused, errored, timed out: a dead or frozen engine — or
  its signals are older than ``stale_after_s``; ``anchor/store.py``) is not renormalised:
  every scorer that reads engine signals (``reads_engine``) counts as its worst value,
  0.0 (``w·0`` for a positive weight, the full penalty ``w`` for a negative one), and the
  router-side scorers keep theirs. And whatever the weights, scores and picker, it is
  ranked after every backend that is not dark: the picker orders the others first, then
  come the dark ones, highest total first. A dark backend thus stays a last-resort
  fallback and is never chosen while a backend with fresh signals survives the filters.
  The per-scorer ``scores`` of a candidate (and ``score``'s parts) stay what each scorer
  said — a stale signal is left out there — so only the total carries the penalty.
  Backends with no metrics (``openai``) and not yet polled ones are never dark.

**Cost.** One decision is a few list passes per scorer over the survivors: every scorer's
``column`` (the ``Scorer`` protocol) returns values aligned with the survivors,
NaN for missing (each candidate's signals are looked up once per decision and shared:
``engine_rows``, ``stats_rows``), and columns that are complete and inside [0, 1] —
checked by ``sum``, ``min`` and ``max`` in C — are added two per comprehension; only a
column with gaps or out-of-range values takes the per-backend path. With no dark backend
(the common case) the dark rules cost one truthiness test of an empty set. Per-backend
``scores`` dicts are built for the returned candidates only (``rank(…, limit=k)``: the first ``k`` in
the picker's order). ``bench/decide.py`` measures it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from llmroute.anchor.protocol import AnchorContext, Filter, Picker, Scorer
from llmroute.types import Backend, Candidate

Column = list[float]
"""One scorer's values aligned with the survivors; NaN where the signal is missing."""


def contribution(weight: float, score: float) -> float:
    """One scorer's share of the total: ``w·x`` for ``w ≥ 0``, ``w·(1−x)`` for ``w < 0``;
    ``x`` is clamped to [0, 1] first."""
    x = min(max(score, 0.0), 1.0)
    return weight * x if weight >= 0 else weight * (1.0 - x)


@dataclass(frozen=True)
class Profile:
    """A routing profile: ``filters`` in order, ``(scorer, weight)`` pairs, one ``picker``.

    See the module docstring for the total score. Weights are config; scorers hold none.
    """

    filters: tuple[Filter, ...]
    scorers: tuple[tuple[Scorer, float], ...]
    picker: Picker
    _active: tuple[tuple[Scorer, float], ...] = field(init=False, repr=False, compare=False)
    _bounded: tuple[bool, ...] = field(init=False, repr=False, compare=False)
    _engine: tuple[bool, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        active = tuple((s, w) for s, w in self.scorers if w != 0)
        object.__setattr__(self, "_active", active)
        object.__setattr__(self, "_bounded", tuple(s.bounded is True for s, _ in active))
        object.__setattr__(self, "_engine", tuple(
            getattr(s, "reads_engine", False) is True for s, _ in active))

    def rank(self, ctx: AnchorContext, backends: Sequence[Backend],
             limit: int | None = None, *, explain: bool = True) -> list[Candidate]:
        """Candidates in the picker's order (empty when every backend is filtered out); with
        ``limit``, only the first ``limit`` of that order (the picker still orders all).
        ``explain=False`` (the request path): a lone survivor is not scored — there is
        nothing to choose — and comes back with score NaN and no per-scorer scores."""
        survivors = self.survivors(ctx, backends)
        if not survivors or (limit is not None and limit <= 0):
            return []
        if not explain and len(survivors) == 1:
            return [_candidate(survivors[0], math.nan, {})]
        ids, cols, totals = self._evaluate(ctx, survivors)
        dark = ctx.snapshot.dark
        order = self._pick(totals, dark) if dark else self.picker.pick(totals)
        if limit is not None:
            order = order[:max(limit, 0)]
        return _candidates(order, survivors, ids, totals, self._names(), cols)

    def survivors(self, ctx: AnchorContext, backends: Sequence[Backend]) -> list[Backend]:
        """The backends every filter keeps, order kept."""
        survivors = list(backends)
        for f in self.filters:
            survivors = f.filter(ctx, survivors)
        return survivors

    def score(self, ctx: AnchorContext, survivors: Sequence[Backend]
              ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """``(totals, parts)``: the total per backend id (insertion order = ``survivors``)
        and each scorer's map ``{name: {backend_id: score}}`` (missing signals left out)."""
        ids, cols, totals = self._evaluate(ctx, survivors)
        parts = {s.name: {bid: x for bid, x in zip(ids, col) if x == x}
                 for (s, _), col in zip(self._active, cols)}
        return totals, parts

    def _evaluate(self, ctx: AnchorContext, survivors: Sequence[Backend]
                  ) -> tuple[list[str], list[Column], dict[str, float]]:
        """``(ids, columns, totals)`` of ``survivors``: one column per active scorer, as
        the scorer gave it; the totals count a dark backend's engine-signal scores as 0.0."""
        ids = [b.id for b in survivors]
        cols = [s.column(ctx, survivors) for s, _ in self._active]
        dark, counted = ctx.snapshot.dark, cols
        if dark and not dark.isdisjoint(ids):
            counted = self._darken(cols, [i in dark for i in ids])
        totals = _totals(self._active, self._bounded, counted, len(ids))
        return ids, cols, dict(zip(ids, totals))

    def _darken(self, cols: list[Column], dark: list[bool]) -> list[Column]:
        """``cols`` with every engine-signal scorer's value at a dark position set to 0.0,
        its worst (new lists: a column may be memoised and shared)."""
        return [[0.0 if d else x for x, d in zip(col, dark)] if engine else col
                for col, engine in zip(cols, self._engine)]

    def _pick(self, totals: dict[str, float], dark: frozenset[str]) -> list[str]:
        """The picker's order of the backends that are not dark, then the dark ones by
        total, highest first (ties in the given order). The picker is asked once, so a
        stateful one (round-robin's turn) advances once per decision."""
        if dark.isdisjoint(totals):
            return self.picker.pick(totals)
        lit = {b: t for b, t in totals.items() if b not in dark}
        unlit = sorted((b for b in totals if b in dark), key=lambda b: -totals[b])
        return (self.picker.pick(lit) if lit else []) + unlit

    def _names(self) -> list[str]:
        return [s.name for s, _ in self._active]


def _clean(col: Column, bounded: bool) -> bool:
    """No NaN, every value in [0, 1] (C-level passes: NaN poisons the sum); the range is
    not checked for a ``bounded`` scorer's column (in [0, 1] or NaN by construction)."""
    total = sum(col)
    return total == total and (bounded or (min(col) >= 0.0 and max(col) <= 1.0))


def _totals(active: Sequence[tuple[Scorer, float]], bounded: Sequence[bool],
            cols: list[Column], n: int) -> list[float]:
    """Total per survivor (module docstring): the complete columns summed together
    (``_weighted_sum``), then a column with gaps or out-of-range values per backend, and
    the totals renormalised over what is present. A negative weight's constant part (``w``
    of ``w + |w|·x``) is added once at the end."""
    complete: list[tuple[float, Column]] = []
    gappy: list[tuple[float, float, Column]] = []
    const = 0.0  # Σ offsets of the complete columns
    for (_, w), sure, col in zip(active, bounded, cols):
        offset, scale = (0.0, w) if w >= 0 else (w, -w)  # w·x, or w·(1−x) = w + |w|·x
        if n and _clean(col, sure):
            complete.append((scale, col))
            const += offset
        else:
            gappy.append((offset, scale, col))
    acc = _weighted_sum(complete, n)
    if const:
        acc = [a + const for a in acc]
    if not gappy:
        return acc
    present = [0.0] * n
    for offset, scale, col in gappy:
        _accumulate(col, offset, scale, acc, present)
    done = sum(scale for scale, _ in complete)
    full = sum(abs(w) for _, w in active)
    mid = sum(w for _, w in active) / 2.0
    return [_renormalise(a, p + done, full, mid) for a, p in zip(acc, present)]


def _weighted_sum(columns: list[tuple[float, Column]], n: int) -> list[float]:
    """``Σ scale · column`` per position (``n`` of them), two columns per list pass (a
    pass costs about as much as the arithmetic it carries at 100 backends)."""
    if not columns:
        return [0.0] * n
    scale, col = columns[0]
    acc = [scale * x for x in col]
    i = 1
    while i + 1 < len(columns):
        (s, xs), (t, ys) = columns[i], columns[i + 1]
        acc = [a + s * x + t * y for a, x, y in zip(acc, xs, ys)]
        i += 2
    if i < len(columns):
        s, xs = columns[i]
        acc = [a + s * x for a, x in zip(acc, xs)]
    return acc


def _accumulate(col: Column, offset: float, scale: float, acc: list[float],
                present: list[float]) -> None:
    """Add one column per backend: NaN counts as missing, other values are clamped."""
    for i, x in enumerate(col):
        if x != x:
            continue
        acc[i] += offset + scale * (0.0 if x < 0.0 else 1.0 if x > 1.0 else x)
        present[i] += scale


def _renormalise(acc: float, present: float, full: float, mid: float) -> float:
    if present == 0.0:
        return mid
    return acc if present == full else acc * full / present


def _candidates(order: list[str], survivors: list[Backend], ids: list[str],
                totals: dict[str, float], names: list[str], cols: list[Column]
                ) -> list[Candidate]:
    """``Candidate``s for ``order``, each with its clamped per-scorer scores."""
    # a few (the request path builds ``max_attempts``): a C-level scan of ``ids`` each;
    # a full order: one index map
    where = ids.index if len(order) <= 8 else dict(zip(ids, range(len(ids)))).__getitem__
    out = []
    for bid in order:
        i = where(bid)
        scores = {}
        for name, col in zip(names, cols):
            x = col[i]
            if x == x:
                scores[name] = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x
        out.append(_candidate(survivors[i], totals[bid], scores))
    return out


def _candidate(backend: Backend, score: float, scores: dict[str, float]) -> Candidate:
    """``Candidate(backend, score, scores)`` set the way a frozen dataclass's own
    ``__init__`` sets it (``object.__setattr__``), without that ``__init__``'s
    default-factory check: about half the cost, and a decision makes one per survivor."""
    c = _new(Candidate)
    _set(c, "backend", backend)
    _set(c, "score", score)
    _set(c, "scores", scores)
    return c


_new = object.__new__
_set = object.__setattr__
