"""single: one pool per request, chosen by ``model`` (pool name, served model, or ``auto``).

``model: auto`` maps the gate's intent label through ``routing.intents`` (default pool
otherwise). The plan's fallback is every other backend, the default pool's first, so a dead
pool still gets an answer from a live engine before the request fails. A request whose
``model`` names a pool is served by that pool only (no fallback: a dead pool is a 503 naming
it, never another pool's model) and the lighter pool its degradation tiers name, unless
``routing.cross_pool_fallback`` is true; one naming a served model is served by the
backends serving it only.

From a strategy file (``kind: single``, ``SingleSpec``): ``pool`` sends every request the
strategy matches to that pool, whatever its ``model`` names (add ``when: {model: [auto]}``
to leave explicit models alone); without ``pool`` the routing above applies, with the
file's ``intents`` (label → pool) over the config's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from llmroute.errors import ModelNotFound
from llmroute.strategy.spec import StrategySpec
from llmroute.strategy.protocol import KindContext, Scorer
from llmroute.types import Backend, ChatRequest, Intent, RoutePlan

AUTO = "auto"


class SingleSpec(StrategySpec):
    """``kind: single``: ``pool`` (serve every matched request there) or ``intents``
    (intent label → pool, over the config's ``routing.intents``)."""

    kind: Literal["single"]
    pool: str | None = None
    intents: dict[str, str] = {}

    def pool_refs(self) -> list[tuple[tuple[Any, ...], str]]:
        """The pool and every pool ``intents`` names."""
        refs = [(("intents", label), pool) for label, pool in self.intents.items()]
        return [(("pool",), self.pool), *refs] if self.pool is not None else refs


def build_single(spec: SingleSpec, ctx: KindContext) -> SingleStrategy:
    """The SingleStrategy a ``single`` file describes, over the router's backends."""
    return SingleStrategy(ctx.backends, {**ctx.intents, **spec.intents}, ctx.default_pool,
                          ctx.max_attempts, pool=spec.pool, cross_pool=ctx.cross_pool_fallback,
                          lighter=ctx.lighter_pools)


class SingleStrategy:
    """Routes to one pool; ``backends`` in config order, ``intents`` label → pool name;
    ``pool`` (when given) serves every request whatever its ``model``; ``cross_pool``: a
    request naming a pool falls back to the other pools too, else only to the pool
    ``lighter`` (pool → lighter pool) names for it."""

    def __init__(self, backends: Mapping[str, Backend], intents: Mapping[str, str],
                 default_pool: str, max_attempts: int = 3, pool: str | None = None,
                 cross_pool: bool = False, lighter: Mapping[str, str] | None = None):
        self._pinned = pool
        self._cross_pool = cross_pool
        self._lighter = dict(lighter or {})
        self._backends = dict(backends)
        self._intents = dict(intents)
        self._default = default_pool
        self._max_attempts = max_attempts
        self._pools = {b.pool for b in self._backends.values()}
        self._members = {p: self._members_of(p) for p in {*self._pools, default_pool}}
        self._fixed = None if pool is None else self._pool_plan(pool, f"strategy pool {pool}")
        self._by_model = self._model_plans()

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan:
        """RoutePlan for ``request``. Raises ModelNotFound for an unknown ``model``."""
        if self._fixed is not None:
            return self._fixed
        if request.model == AUTO:
            pool = self._intents.get(intent.label, self._default)
            return self._pool_plan(pool, f"intent {intent.label} → pool {pool}")
        plan = self._by_model.get(request.model)
        if plan is not None:
            return plan
        raise ModelNotFound(f"The model '{request.model}' does not exist: use 'auto', a pool "
                            f"({', '.join(sorted(self._pools))}) or a served model name",
                            param="model")

    def describe(self, request: ChatRequest, intent: Intent, score: Scorer
                 ) -> dict[str, Any]:
        """``{"pool"}`` (the pinned pool, or None) and ``intents`` (label → pool)."""
        return {"pool": self._pinned, "intents": dict(self._intents)}

    def _pool_plan(self, pool: str, reason: str, fallback: bool = True) -> RoutePlan:
        primary, rest = self._members.get(pool) or self._members_of(pool)
        if not fallback:
            light = self._lighter.get(pool)
            rest = tuple(i for i in rest if self._backends[i].pool == light)
        return RoutePlan(pool, reason, primary, rest, self._max_attempts)

    def _model_plans(self) -> dict[str, RoutePlan]:
        """The plan of a request whose ``model`` names a pool (that pool's), else a served
        model (its backends, in the pool of the first in config order); made once, as the
        backends do not change while the strategy lives (a plan is immutable). ``auto`` is
        left out: ``plan`` reads the intent for it."""
        plans = {p: self._pool_plan(p, f"model names pool {p}", fallback=self._cross_pool)
                 for p in self._pools}
        for b in self._backends.values():
            if b.model not in plans:
                served = tuple(x.id for x in self._backends.values() if x.model == b.model)
                plans[b.model] = RoutePlan(b.pool, f"served model {b.model}", served,
                                           max_attempts=self._max_attempts)
        plans.pop(AUTO, None)
        return plans

    def _members_of(self, pool: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(primary, fallback)`` backend ids of a plan for ``pool`` (worked out once per
        pool at construction: the backends do not change while the strategy lives)."""
        primary = tuple(b.id for b in self._backends.values() if b.pool == pool)
        rest = sorted((b for b in self._backends.values() if b.pool != pool),
                      key=lambda b: b.pool != self._default)
        return primary, tuple(b.id for b in rest)
