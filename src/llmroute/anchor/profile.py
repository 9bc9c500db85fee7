"""The anchor's profile: filters → weighted scorers → picker → ordered candidates.

Total score of a backend, from the scorers ``s`` with weight ``w`` and clamped score
``x ∈ [0, 1]`` (higher is better):

- a positive weight contributes ``w · x``;
- a negative weight is a *penalty on the complement*: it contributes ``w · (1 − x)``, i.e.
  ``−|w|`` times how bad the backend is on that signal. Seed 000's ``− 0.1 · queue`` is
  thus ``−0.1 · (1 − queue-depth score)``, the queue load itself, and the total ranges
  over ``[Σ negative w, Σ positive w]``. (Ordering-wise this equals ``|w| · x`` minus a
  constant, so a negative weight never rewards load.)
- **Missing or stale signals.** A scorer leaves out a backend whose signal is missing or
  stale. The backend's total is then computed over the scorers it has and renormalised:
  ``Σ_present c_s · (Σ_all |w|) / (Σ_present |w|)``, so a backend is never ranked by a
  zero that stands for "unknown", and backends with different gaps stay comparable.
  A backend with no signal at all gets the neutral mid-point ``Σ w / 2``. The router's own
  counters (in-flight, breaker) are always present, so with any of them in the mix the
  decision is never a coin toss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmroute.anchor.protocol import AnchorContext, Filter, Picker, Scorer
from llmroute.types import Backend, Candidate


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

    def rank(self, ctx: AnchorContext, backends: Sequence[Backend]) -> list[Candidate]:
        """Ordered candidates (possibly empty when every backend is filtered out)."""
        survivors = self.survivors(ctx, backends)
        if not survivors:
            return []
        totals, scores = self._score(ctx, survivors)
        by_id = {b.id: b for b in survivors}
        return [Candidate(by_id[bid], totals[bid], scores[bid])
                for bid in self.picker.pick(totals)]

    def survivors(self, ctx: AnchorContext, backends: Sequence[Backend]) -> list[Backend]:
        """The backends every filter keeps, order kept."""
        survivors = list(backends)
        for f in self.filters:
            survivors = f.filter(ctx, survivors)
        return survivors

    def score(self, ctx: AnchorContext, survivors: Sequence[Backend]
              ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """``(totals, parts)``: the total per backend id (insertion order = ``survivors``)
        and each scorer's raw map ``{name: {backend_id: score}}``."""
        active = [(s, w) for s, w in self.scorers if w != 0]
        parts = {s.name: s.score(ctx, survivors) for s, _ in active}
        return self._combine(active, parts, survivors)[0], parts

    def _score(self, ctx: AnchorContext, survivors: Sequence[Backend]
               ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """``(totals, scores)``: totals and each backend's ``{scorer name: score}``."""
        active = [(s, w) for s, w in self.scorers if w != 0]
        parts = {s.name: s.score(ctx, survivors) for s, _ in active}
        return self._combine(active, parts, survivors)

    @staticmethod
    def _combine(active: list[tuple[Scorer, float]], parts: dict[str, dict[str, float]],
                 survivors: Sequence[Backend]
                 ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        acc = dict.fromkeys((b.id for b in survivors), 0.0)
        present = dict.fromkeys(acc, 0.0)
        scores: dict[str, dict[str, float]] = {bid: {} for bid in acc}
        for s, w in active:
            _accumulate(s.name, parts[s.name], w, acc, present, scores)
        full = sum(abs(w) for _, w in active)
        mid = sum(w for _, w in active) / 2.0
        totals = {bid: _renormalise(a, present[bid], full, mid) for bid, a in acc.items()}
        return totals, scores


def _accumulate(name: str, part: dict[str, float], w: float, acc: dict[str, float],
                present: dict[str, float], scores: dict[str, dict[str, float]]) -> None:
    """Add one scorer's contributions (see ``contribution``) for the backends it scored."""
    size = abs(w)
    offset, scale = (0.0, w) if w >= 0 else (w, -w)  # w·x, or w·(1−x) = w + |w|·x
    for bid, x in part.items():
        if bid not in acc or x != x:  # NaN counts as missing
            continue
        scores[bid][name] = x
        acc[bid] += offset + scale * (0.0 if x < 0.0 else 1.0 if x > 1.0 else x)
        present[bid] += size


def _renormalise(acc: float, present: float, full: float, mid: float) -> float:
    if present == 0.0:
        return mid
    return acc if present == full else acc * full / present
