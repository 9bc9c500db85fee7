"""The legs of a strategy that serves a request itself (``strategy.protocol.Legs``): each
leg is ranked by the anchor inside one pool and sent through dispatch's failover, and every
leg spends from the request's one attempt budget (``dispatch.Budget``), so retries never
multiply across legs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from llmroute.dispatch.attempt import Budget
from llmroute.dispatch.deps import Deps
from llmroute.dispatch.failover import pending_prefill, with_failover
from llmroute.dispatch.relay import Relay
from llmroute.errors import ContextLengthExceeded, NoBackendAvailable
from llmroute.fuse.stops import cut_answer, pending_stops
from llmroute.observe.trace import Recorder
from llmroute.policy.auth import Caller
from llmroute.types import Backend, Candidate, ChatRequest, RoutePlan

Ranker = Callable[..., list[Candidate]]
"""``rank(request, plan, explain=False)``: a plan's backends ranked for a request
(``pipeline.rank`` with the request's intent)."""


class PoolLegs:
    """Legs over dispatch ``deps`` and the router's ``backends``: ``rank`` orders a pool's
    members, ``left`` attempts remain of the request's budget; each attempt is noted in
    ``trace`` (the request's); ``caller`` (None: auth off) must be allowed every pool a leg uses."""

    def __init__(self, deps: Deps, backends: Mapping[str, Backend], rank: Ranker, left: int,
                 trace: Recorder, caller: Caller | None = None):
        self._deps = deps
        self._backends = backends
        self._rank = rank
        self.left = left
        self.trace = trace
        self._caller = caller

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

        async def call(backend: Backend) -> dict[str, Any]:
            return await self._deps.client.complete(backend, request.endpoint, request.body,
                                                    request.request_id)
        try:
            attempt, answer = await with_failover(self._deps, plan, budget, call,
                                                  request.prompt_tokens,
                                                  pending_prefill(self._deps, request),
                                                  request.body)
        finally:
            self.left += budget.left
        usage = answer.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        attempt.succeed(output_tokens=tokens if isinstance(tokens, int) else None)
        stops = pending_stops(request.body, self._deps.client.learned, attempt.backend)
        return attempt.backend, answer if stops is None else cut_answer(answer, stops)

    async def stream(self, request: ChatRequest, pools: Sequence[str]
                     ) -> tuple[Backend, AsyncIterator[bytes]]:
        """See ``Legs.stream``; the relay's legs spend from the same budget."""
        plans = [self._plan(p) for p in pools]
        ranked = [self._rank(request, plan) for plan in plans]
        order = ranked[0][:1] + [c for r in ranked[1:] for c in r] + ranked[0][1:]
        budget = Budget(order, self.left, self.trace)
        relay = Relay(self._deps, request, plans[0], budget)
        relay.prewarm()
        try:
            attempt = (await relay.open_leg()).attempt
        except BaseException:
            relay.stop_warm()
            raise
        finally:
            self.left = budget.left
        return attempt.backend, relay.stream()

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

    def _members(self, pool: str) -> tuple[str, ...]:
        return tuple(b.id for b in self._backends.values() if b.pool == pool)
