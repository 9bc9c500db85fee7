"""The legs of a strategy that serves a request itself (``strategy.protocol.Legs``): each
leg is ranked by the anchor inside one pool and sent through dispatch's one door
(``dispatch.send``: the pool's degradation tier, the capability checks, the frozen-engine
watchdog and failover, as for a plain request), and every leg spends from the request's one
attempt budget (``dispatch.Budget``), so retries never multiply across legs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from llmroute.dispatch import Budget, send
from llmroute.errors import ContextLengthExceeded, NoBackendAvailable
from llmroute.flow.rank import rank_plan
from llmroute.observe.trace import Recorder
from llmroute.policy.auth import Caller
from llmroute.runtime import Runtime
from llmroute.types import Backend, Candidate, ChatRequest, Intent, RoutePlan


class PoolLegs:
    """Legs over ``rt`` for a request the gate read as ``intent``: a leg's pool is ranked
    with that intent, ``left`` attempts remain of the request's budget; each attempt is
    noted in ``trace`` (the request's); ``caller`` (None: auth off) must be allowed every
    pool a leg uses. ``client_logprobs``: the client asked for logprobs, so a leg asking
    for them needs a backend that gives them (else they are the strategy's own ask, which
    it copes without: ``dispatch.send``'s ``optional_logprobs``)."""

    def __init__(self, rt: Runtime, intent: Intent, left: int, trace: Recorder,
                 caller: Caller | None = None, client_logprobs: bool = False):
        self._rt = rt
        self._intent = intent
        self.left = left
        self.trace = trace
        self._caller = caller
        self._optional_logprobs = not client_logprobs

    def check_pool(self, pool: str) -> None:
        """Raises PermissionDenied when the caller may not use ``pool``."""
        if self._caller is not None:
            self._caller.check_pool(pool)

    async def complete(self, request: ChatRequest, pool: str, reserve: int = 0
                       ) -> tuple[Backend, dict[str, Any]]:
        """See ``Legs.complete``."""
        plan = self._plan(pool, reserve)
        budget = Budget(self._rank(request, plan), self.left - reserve, self.trace)
        self.left = reserve  # taken now, what is unused given back: legs may run concurrently
        try:
            sent = await send(self._rt.dispatch, request, plan, budget,
                              optional_logprobs=self._optional_logprobs)
        finally:
            self.left += budget.left
        assert sent.body is not None
        return sent.backend, sent.body

    async def stream(self, request: ChatRequest, pools: Sequence[str]
                     ) -> tuple[Backend, AsyncIterator[bytes]]:
        """See ``Legs.stream``; the relay's legs spend from the same budget."""
        plans = [self._plan(p) for p in pools]
        ranked = [self._rank(request, plan) for plan in plans]
        order = ranked[0][:1] + [c for r in ranked[1:] for c in r] + ranked[0][1:]
        budget = Budget(order, self.left, self.trace)
        try:
            sent = await send(self._rt.dispatch, request, plans[0], budget)
        finally:
            self.left = budget.left
        assert sent.stream is not None
        return sent.backend, sent.stream

    def best_score(self, request: ChatRequest, pool: str) -> float | None:
        """See ``Legs.best_score`` (the pool ranked with every scorer, as ``/debug/route``
        does)."""
        plan = RoutePlan(pool, "score", self._members(pool), (), 1)
        if not plan.backend_ids:
            return None
        try:
            ranked = self._rank(request, plan, explain=True)
        except ContextLengthExceeded:
            return None
        scores = [c.score for c in ranked if c.score == c.score]
        return max(scores) if scores else None

    def _plan(self, pool: str, reserve: int = 0) -> RoutePlan:
        """A leg's plan: every backend of ``pool``, the budget left but ``reserve``. Raises
        PermissionDenied or NoBackendAvailable (budget spent)."""
        self.check_pool(pool)
        if self.left - reserve <= 0:
            raise NoBackendAvailable(f"the request's attempt budget is spent before its leg "
                                     f"on pool {pool}")
        return RoutePlan(pool, "strategy leg", self._members(pool), (), self.left - reserve)

    def _rank(self, request: ChatRequest, plan: RoutePlan, explain: bool = False
              ) -> list[Candidate]:
        return rank_plan(self._rt, request, self._intent, plan, explain=explain)

    def _members(self, pool: str) -> tuple[str, ...]:
        return tuple(b.id for b in self._rt.backends.values() if b.pool == pool)
