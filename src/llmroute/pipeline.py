"""The request flow, one step per line (DESIGN.md §2): gate → strategy → anchor → dispatch.

The layers never call each other; every step gets what it needs as arguments.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from llmroute import dispatch
from llmroute.anchor.protocol import AnchorContext
from llmroute.errors import ContextLengthExceeded
from llmroute.runtime import Runtime
from llmroute.types import Backend, Candidate, ChatRequest, Intent, RoutePlan


@dataclass(frozen=True)
class Routed:
    """The answer: routing ``headers`` plus a JSON ``body`` or an SSE byte ``stream``."""

    headers: dict[str, str]
    body: dict[str, Any] | None = None
    stream: AsyncIterator[bytes] | None = None


@dataclass(frozen=True)
class Decision:
    """What the router would do for a request, without sending it."""

    intent: Intent
    plan: RoutePlan
    candidates: list[Candidate]


def decide(rt: Runtime, request: ChatRequest, intent: Intent | None = None) -> Decision:
    """Gate (unless ``intent`` is given), strategy and anchor for ``request``. Raises
    ModelNotFound or ContextLengthExceeded."""
    intent = intent if intent is not None else rt.gate.classify(request)
    plan = rt.strategy.plan(request, intent)
    candidates = rank(rt, request, intent, plan)
    return Decision(intent, plan, candidates)


async def route(rt: Runtime, request: ChatRequest) -> Routed:
    """Serve ``request``: decide, dispatch with failover, and describe the route in headers."""
    d = decide(rt, request, await rt.gate.classify_async(request))
    if request.stream:
        backend, stream = await dispatch.open_stream(rt, request, d.plan, d.candidates)
        return Routed(route_headers(request, d, backend), stream=stream)
    backend, body = await dispatch.complete(rt, request, d.plan, d.candidates)
    return Routed(route_headers(request, d, backend), body=body)


def rank(rt: Runtime, request: ChatRequest, intent: Intent, plan: RoutePlan) -> list[Candidate]:
    """Primary candidates ranked by the profile, then the plan's fallbacks ranked."""
    now = rt.clock()
    ctx = AnchorContext(request, intent, rt.stats.snapshot(now), now)
    primary = rt.profile.rank(ctx, [rt.backends[b] for b in plan.backend_ids])
    fallback = rt.profile.rank(ctx, [rt.backends[b] for b in plan.fallback_ids])
    if primary or fallback:
        return primary + fallback
    longest = max(rt.backends[b].context_length for b in plan.backend_ids + plan.fallback_ids)
    raise ContextLengthExceeded(
        f"This request needs about {request.prompt_tokens} prompt tokens plus "
        f"{request.max_tokens or 0} output tokens; the largest context is {longest} tokens",
        param="messages" if request.endpoint == "chat" else "prompt")


def route_headers(request: ChatRequest, d: Decision, backend: Backend) -> dict[str, str]:
    """``x-request-id`` and the ``x-llmroute-*`` headers describing the decision."""
    return {"x-request-id": request.request_id, "x-llmroute-backend": backend.id,
            "x-llmroute-pool": backend.pool, "x-llmroute-intent": d.intent.label}
