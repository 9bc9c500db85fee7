"""The anchor's profile: filters → weighted scorers → picker → ordered candidates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmroute.anchor.protocol import AnchorContext, Filter, Picker, Scorer
from llmroute.types import Backend, Candidate


@dataclass(frozen=True)
class Profile:
    """A routing profile: ``filters`` in order, ``(scorer, weight)`` pairs, one ``picker``.

    Total score = Σ weight · clamp(score, 0, 1). Weights are config; scorers hold none.
    """

    filters: tuple[Filter, ...]
    scorers: tuple[tuple[Scorer, float], ...]
    picker: Picker

    def rank(self, ctx: AnchorContext, backends: Sequence[Backend]) -> list[Candidate]:
        """Ordered candidates (possibly empty when every backend is filtered out)."""
        survivors = list(backends)
        for f in self.filters:
            survivors = f.filter(ctx, survivors)
        if not survivors:
            return []
        parts = {s.name: s.score(ctx, survivors) for s, _ in self.scorers}
        totals = {b.id: self._total(parts, b.id) for b in survivors}
        by_id = {b.id: b for b in survivors}
        return [Candidate(by_id[bid], totals[bid], {n: p[bid] for n, p in parts.items()})
                for bid in self.picker.pick(totals)]

    def _total(self, parts: dict[str, dict[str, float]], backend_id: str) -> float:
        return sum(w * min(max(parts[s.name][backend_id], 0.0), 1.0) for s, w in self.scorers)
