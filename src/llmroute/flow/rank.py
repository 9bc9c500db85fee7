"""Plan → candidates: a plan's backends ranked by the anchor for one request (``rank_plan``:
used by the pipeline's ``rank`` step, the embeddings path, every strategy leg and ``GET
/debug/route``)."""

from __future__ import annotations

from llmroute.anchor.protocol import AnchorContext
from llmroute.flow.call import Call, Decision
from llmroute.observe.quality import quality_note
from llmroute.policy.counting import too_long
from llmroute.runtime import Runtime
from llmroute.types import Backend, Candidate, ChatRequest, Intent, RoutePlan


def rank_plan(rt: Runtime, request: ChatRequest, intent: Intent, plan: RoutePlan, *,
              explain: bool = True) -> list[Candidate]:
    """The plan's primaries in the plan's pool, ranked by the profile (its pool filter keeps
    ``plan.pool``), then the rest: primaries from other pools and the plan's fallbacks.

    Only what dispatch can reach is built. A request gets at most ``plan.max_attempts``
    attempts, and after a context-length refusal dispatch moves on only to backends with a
    larger context; so when every primary has the same context, the ranked primaries stop
    at ``max_attempts`` (the picker still orders them all). The rest is scored only when the
    primaries cannot fill the budget; otherwise it is only filtered, in the plan's order
    (reached after a context refusal, or by the degradation tier). ``explain=False`` (the
    request path) leaves a lone surviving backend unscored (``Profile.rank``). Raises
    ContextLengthExceeded when nothing fits."""
    now = rt.clock()
    snapshot = rt.stats.snapshot(now)
    ctx = AnchorContext(request, intent, snapshot, now, frozenset((plan.pool,)))
    named = [rt.backends[b] for b in plan.backend_ids]
    uniform = len(named) == 1 or len({b.context_length for b in named}) == 1
    primary = rt.profile.rank(ctx, named, limit=plan.max_attempts if uniform else None,
                              explain=explain)
    rest = [b for b in named if b.pool != plan.pool]
    if plan.fallback_ids:
        rest += [rt.backends[b] for b in plan.fallback_ids]
    fallback = _fallback(rt, AnchorContext(request, intent, snapshot, now), rest,
                         plan.max_attempts - len(primary), explain) if rest else []
    if primary or fallback:
        return primary + fallback
    longest = max(rt.backends[b].context_length for b in plan.backend_ids + plan.fallback_ids)
    raise too_long(request, longest)


def _fallback(rt: Runtime, ctx: AnchorContext, backends: list[Backend], attempts_left: int,
              explain: bool) -> list[Candidate]:
    """``backends`` ranked when the primaries leave attempts unused, else only filtered
    (given order, score 0)."""
    if attempts_left > 0:
        return rt.profile.rank(ctx, backends, explain=explain)
    return [Candidate(b, 0.0) for b in rt.profile.survivors(ctx, backends)]


def rank(call: Call, explain: bool = False) -> None:
    """The pipeline's ``rank`` step: ``call.decision``, the matched plan ranked (no
    candidates when the plan names no backend: a person answers), noted in the trace.
    ``explain``: see ``rank_plan``. Raises ContextLengthExceeded."""
    matched, intent = call.matched, call.intent
    assert matched is not None and intent is not None
    plan = matched.plan
    candidates = rank_plan(call.rt, call.request, intent, plan, explain=explain) \
        if plan.backend_ids or plan.fallback_ids else []
    call.decision = Decision(intent, plan, candidates, matched)
    call.trace.anchor(candidates)
    views = call.rt.stats.quality() if call.rt.stats.quality is not None else None
    note = quality_note(views, plan.backend_ids or plan.fallback_ids, candidates) \
        if views else None
    if note is not None:
        call.trace.quality(note)
