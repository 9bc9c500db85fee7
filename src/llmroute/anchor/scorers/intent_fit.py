"""intent-fit: a pool whose declared strengths match the request's intent is better."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import MapScorer, present
from llmroute.types import Backend, Intent


@dataclass(frozen=True, slots=True)
class PoolFit:
    """A pool's declared ``strengths`` (intent labels) and ``max_complexity`` (0.1–5.0)."""

    strengths: tuple[str, ...] = ()
    max_complexity: float | None = None


def fit(pool: PoolFit, intent: Intent) -> float | None:
    """Strength match × complexity headroom, in [0, 1]; None when the pool declares nothing.

    Match: ``0.5 + 0.5·confidence`` when the intent's label is a strength, ``0.5 -
    0.5·confidence`` when it is not (a sure verdict counts fully; an unsure one stays near
    the neutral 0.5); 1.0 without declared strengths. Headroom: ``min(1, max_complexity /
    complexity)`` (1.0 without a limit).
    """
    if not pool.strengths and pool.max_complexity is None:
        return None
    match = 1.0
    if pool.strengths:
        sign = 1.0 if intent.label in pool.strengths else -1.0
        match = 0.5 + 0.5 * sign * min(max(intent.confidence, 0.0), 1.0)
    headroom = 1.0
    if pool.max_complexity is not None:
        headroom = min(1.0, pool.max_complexity / max(intent.complexity, 1e-6))
    return match * headroom


class IntentFitScorer(MapScorer):
    """``fit`` of each backend's pool (``pools``: name → PoolFit) for ``ctx.intent``."""

    name = "intent-fit"

    def __init__(self, pools: Mapping[str, PoolFit]):
        self._pools = dict(pools)

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring; missing for pools without declarations."""
        def value(bid_pool: str) -> float | None:
            pool = self._pools.get(bid_pool)
            return None if pool is None else fit(pool, ctx.intent)
        by_id = {b.id: b.pool for b in candidates}
        return present(candidates, lambda bid: value(by_id[bid]))
