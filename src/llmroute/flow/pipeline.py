"""The request flow on one screen (DESIGN.md §2): ``route`` runs the steps over one ``Call``.

    authenticate → admit → screen → count → gate → choose → rank → answer (inside the
    answer stages) → record

``authenticate`` runs before the body is read (``api/exchange.py``); each later step is one
named call here, and a request stops at the first step that refuses it. What wraps the
answer (usage meter, priority slot, trial timing, output filter, …) is an answer stage
(``flow/stages.py``), run in the order the Runtime carries; when a step fails after
admission, every stage gives back what it holds (``stages.abandon``).
"""

from __future__ import annotations

from collections.abc import Mapping

from llmroute.flow.call import Call, Decision
from llmroute.flow.headers import timing_entry
from llmroute.flow.rank import rank
from llmroute.flow.stages import abandon, around
from llmroute.flow.strategies import answer
from llmroute.policy.auth import Caller
from llmroute.policy.counting import context_limit
from llmroute.runtime import Runtime
from llmroute.strategy.snapshot import BUILTIN_ID
from llmroute.strategy.triggers import NOBODY, Asker
from llmroute.types import Routed


async def route(call: Call) -> Routed:
    """Serve a chat or completions ``call``, each step noted in its trace. Raises the
    first refusal: 400 (a bad ``x-llmroute-priority``, a blocked input, a context too
    long), 403 (a model, strategy or pool the key may not use), 429 (limits), 503 (shed
    while the fleet is saturated, no backend), or the engine's own error."""
    try:
        await admit(call, defer=call.rt.cache is not None)
        screen(call)
        await count(call)
        await classify(call)
        choose(call)
        rank(call)
        return record(call, await around(call, answer))
    except BaseException as err:
        await abandon(call, err)
        raise


async def authenticate(rt: Runtime, headers: Mapping[str, str]) -> Caller | None:
    """The caller presenting a key in ``headers`` (None with auth off); run before the body
    is read. Raises AuthenticationFailed (401)."""
    return None if rt.policy is None else await rt.policy.authenticate(headers)


async def admit(call: Call, defer: bool = False) -> None:
    """The request's priority class (``call.klass``, classified once: 400 for a header
    naming no class, 403 when the key may not choose); with auth on, the key's model
    permission (403), limits and quotas (429): ``call.ticket`` reserves its tokens; with
    priority classes, a place (``call.slot``), waited for while the fleet is saturated
    (503 when shed) — with ``defer`` (the answer cache is on) only taken here when free at
    once, else left to the cache stage, so that a hit never waits for an engine's place
    (``flow/cache.py``). The usage meter and the priority slot stages give them back."""
    rt, caller = call.rt, call.caller
    gate = rt.priority
    if gate is not None:
        klass = call.klass = gate.classify(caller and caller.key, call.headers)  # 400
        if klass is not None and klass.e2e_target_s is not None and call.request.stream:
            call.request = call.request._replace(finish_by=rt.clock() + klass.e2e_target_s)
    if caller is not None and rt.policy is not None:
        ticket = call.ticket = await rt.policy.admit(caller, call.request)
        call.trace.caller(caller.key.id, caller.tenant.id)
        if ticket.budget_left is not None:  # the budget_left_below trigger reads it
            call.caller = Caller(caller.key, caller.tenant, ticket.budget_left)
    if gate is not None and call.klass is not None:
        call.slot = gate.enter_now(call.klass) if defer else await gate.enter(call.klass)


def screen(call: Call) -> None:
    """The input through the sensitive-word filter (``rt.content_filter``, when there is
    one): a block match raises ContentFiltered (400) before the gate; masks the prompt."""
    if call.rt.content_filter is not None:
        call.request = call.rt.content_filter.check(call.request, call.trace)


async def count(call: Call) -> None:
    """Count the prompt's tokens (``rt.tokens``: the engine's count near a context limit,
    else the estimate; may clamp ``max_tokens``). Raises ContextLengthExceeded (400) before
    the gate."""
    if call.rt.tokens is not None:
        call.request = await call.rt.tokens.measure(call.request, context_limit(call.caller),
                                                    call.trace)


async def classify(call: Call) -> None:
    """The gate: ``call.intent``, its time in ``call.timing`` (the ``server-timing``
    header's ``gate``)."""
    intent = call.intent = await call.rt.gate.classify(call.request)
    call.timing.append(timing_entry("gate", call.trace.gate(intent)))


def choose(call: Call) -> None:
    """The strategy matched on the request, its intent, its headers and who asks
    (``asker``): ``call.matched``. Raises ModelNotFound (404) or PermissionDenied (403: a
    strategy other than the built-in one that the key may not use)."""
    assert call.intent is not None
    matched = call.matched = call.rt.strategy.choose(call.request, call.intent, call.headers,
                                                     asker(call))
    call.trace.strategy(matched.header, matched.kind, matched.plan.pool)
    if call.caller is not None and matched.strategy_id != BUILTIN_ID:
        trial = matched.trial
        call.caller.check_strategy(matched.strategy_id if trial is None else trial.strategy_id)


def record(call: Call, routed: Routed) -> Routed:
    """A JSON answer noted in the trace as the client gets it (a stream is noted as it
    passes)."""
    if routed.stream is None:
        call.trace.answered(routed.body)
    return routed


def asker(call: Call) -> Asker | None:
    """Who the tenant / API-key / priority-class triggers read: with auth on, the
    authenticated caller (``NOBODY`` without one; never the request headers) in its
    priority class (``call.klass``, else its key's); with auth off, None (the headers)."""
    caller = call.caller
    if call.rt.policy is None:
        return None
    if caller is None:
        return NOBODY
    klass = caller.key.priority if call.klass is None else call.klass.name
    return Asker(caller.tenant.id, caller.key.name, klass, caller.key.id, caller.budget_left)


async def decide(call: Call, *, explain: bool = True) -> Decision:
    """What the router would do with ``call``, sending nothing (``GET /debug/route``): the
    gate (unless ``call.intent`` is set), the strategy and the ranking (``explain``: every
    scorer's score, see ``rank.rank_plan``). Raises ModelNotFound or ContextLengthExceeded."""
    if call.intent is None:
        await classify(call)
    choose(call)
    rank(call, explain=explain)
    assert call.decision is not None
    return call.decision
