"""The legs of a strategy that serves a request itself (``strategy.protocol.Legs``): each
leg is ranked by the anchor inside one pool and sent through dispatch's failover, and every
leg spends from the request's one attempt budget (``dispatch.Budget``), so retries never
multiply across legs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llmroute.dispatch.attempt import Budget
from llmroute.dispatch.deps import Deps
from llmroute.dispatch.failover import with_failover
from llmroute.errors import NoBackendAvailable
from llmroute.observe.trace import Recorder
from llmroute.policy.auth import Caller
from llmroute.types import Backend, Candidate, ChatRequest, RoutePlan

Ranker = Callable[[ChatRequest, RoutePlan], list[Candidate]]
"""Ranks a plan's backends for a request (``pipeline.rank`` with the request's intent)."""


class PoolLegs:
    """Legs over dispatch ``deps`` and the router's ``backends``: ``rank`` orders a pool's
    members, ``left`` attempts remain of the request's budget; each attempt is noted in
    ``trace``; ``caller`` (None: auth off) must be allowed every pool a leg uses."""

    def __init__(self, deps: Deps, backends: Mapping[str, Backend], rank: Ranker, left: int,
                 trace: Recorder, caller: Caller | None = None):
        self._deps = deps
        self._backends = backends
        self._rank = rank
        self.left = left
        self._trace = trace
        self._caller = caller

    async def complete(self, request: ChatRequest, pool: str) -> tuple[Backend, dict[str, Any]]:
        """See ``Legs.complete``."""
        if self._caller is not None:
            self._caller.check_pool(pool)
        if self.left <= 0:
            raise NoBackendAvailable(f"the request's attempt budget is spent before its leg "
                                     f"on pool {pool}")
        members = tuple(b.id for b in self._backends.values() if b.pool == pool)
        plan = RoutePlan(pool, "strategy leg", members, (), self.left)
        budget = Budget(self._rank(request, plan), self.left, self._trace)

        async def call(backend: Backend) -> dict[str, Any]:
            return await self._deps.client.complete(backend, request.endpoint, request.body,
                                                    request.request_id)
        try:
            attempt, answer = await with_failover(self._deps, plan, budget, call,
                                                  request.prompt_tokens)
        finally:
            self.left = budget.left
        usage = answer.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        attempt.succeed(output_tokens=tokens if isinstance(tokens, int) else None)
        return attempt.backend, answer
