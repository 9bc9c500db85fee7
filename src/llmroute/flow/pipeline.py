"""The request flow, one step per line (DESIGN.md §2): authenticate → admit → filter input
→ count tokens → gate → strategy → anchor → dispatch → filter output → reconcile usage.

The layers never call each other; every step gets what it needs as arguments.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from llmroute import dispatch
from llmroute.anchor.protocol import AnchorContext
from llmroute.errors import LLMRouteError, NoBackendAvailable
from llmroute.flow.legs import PoolLegs
from llmroute.observe.trace import Recorder
from llmroute.policy.auth import Caller
from llmroute.policy.priority import PriorityClass, PriorityGate
from llmroute.policy.counting import context_limit, too_long
from llmroute.policy.usage import Metered, answer_tokens
from llmroute.flow.routed import Decision, Routed
from llmroute.runtime import Runtime
from llmroute.strategy.answers import non_streamed, replay
from llmroute.strategy.protocol import NO_HEADERS, Matched, Run, Runner
from llmroute.strategy.snapshot import BUILTIN_ID, Entry, StrategySet
from llmroute.strategy.trials import verified
from llmroute.strategy.triggers import NOBODY, Asker
from llmroute.types import Backend, Candidate, ChatRequest, Intent, RoutePlan

Server = Callable[[Runtime, ChatRequest, Caller | None, Mapping[str, str], Recorder | None],
                  Awaitable[Routed]]
"""How ``route`` serves an admitted request: ``serve`` (chat, completions) by default."""


async def decide(rt: Runtime, request: ChatRequest, intent: Intent | None = None, *,
                 explain: bool = True, headers: Mapping[str, str] = NO_HEADERS) -> Decision:
    """Gate (unless ``intent`` is given), then ``settle``. Raises ModelNotFound or
    ContextLengthExceeded."""
    intent = intent if intent is not None else await rt.gate.classify(request)
    return settle(rt, request, intent, explain=explain, headers=headers)


def settle(rt: Runtime, request: ChatRequest, intent: Intent, *, explain: bool = True,
           headers: Mapping[str, str] = NO_HEADERS, trace: Recorder | None = None,
           caller: Caller | None = None) -> Decision:
    """Strategy (matched on the request, its ``intent``, ``headers`` and ``asker_of`` the
    ``caller``) and anchor, each noted in ``trace``; ``explain``: see ``rank``. Raises
    ModelNotFound or ContextLengthExceeded."""
    matched = rt.strategy.choose(request, intent, headers, asker_of(rt, caller, headers))
    return decision(rt, request, intent, matched, explain, trace)


def asker_of(rt: Runtime, caller: Caller | None, headers: Mapping[str, str]) -> Asker | None:
    """Who the tenant / API-key / priority-class triggers read: with auth on, the
    authenticated ``caller`` (``NOBODY`` without one; never the request headers), its
    priority class as ``rt.priority`` classifies it; with auth off, None (the headers)."""
    if rt.policy is None:
        return None
    if caller is None:
        return NOBODY
    klass = caller.key.priority if rt.priority is None \
        else rt.priority.classify(caller.key, headers).name
    return Asker(caller.tenant.id, caller.key.name, klass, caller.key.id)


def decision(rt: Runtime, request: ChatRequest, intent: Intent, matched: Matched,
             explain: bool = False, trace: Recorder | None = None) -> Decision:
    """The Decision of ``matched``: its plan ranked by the anchor (see ``settle``)."""
    plan = matched.plan
    if trace is not None:
        trace.strategy(matched.header, matched.kind, plan.pool)
    named = plan.backend_ids or plan.fallback_ids  # a plan naming none: a person answers
    ranked = rank(rt, request, intent, plan, explain=explain) if named else []
    d = Decision(intent, plan, ranked, matched)
    if trace is not None:
        trace.anchor(d.candidates)
    return d


async def authenticate(rt: Runtime, headers: Mapping[str, str]) -> Caller | None:
    """The caller presenting a key in ``headers`` (None with auth off); run before the body
    is read. Raises AuthenticationFailed (401)."""
    return None if rt.policy is None else await rt.policy.authenticate(headers)


async def route(rt: Runtime, request: ChatRequest, caller: Caller | None = None,
                headers: Mapping[str, str] = NO_HEADERS, trace: Recorder | None = None,
                server: Server | None = None) -> Routed:
    """Serve ``request`` for ``caller`` (None: auth off; its HTTP ``headers`` feed the
    strategy triggers): its priority class (400/403 for a bad ``x-llmroute-priority``),
    admit (403/429; a refusal costs nothing after it), wait for a place when the fleet is
    saturated (``prioritised``: 503 when shed), ``serve`` (or
    ``server``: ``embeddings.serve_embeddings`` for ``/v1/embeddings``), then reconcile the
    reservation with the real usage — now for JSON, when the stream ends for SSE — and add
    the ``x-ratelimit-*`` headers. Each step is noted in ``trace``."""
    run = server or serve
    gate = rt.priority
    klass = None if gate is None else gate.classify(caller and caller.key, headers)  # 400
    if klass is not None and klass.e2e_target_s is not None and request.stream:
        request = request._replace(finish_by=rt.clock() + klass.e2e_target_s)
    if caller is None or rt.policy is None:
        if gate is None or klass is None:
            return await run(rt, request, None, headers, trace)
        return await prioritised(gate, klass, run(rt, request, None, headers, trace))
    ticket = await rt.policy.admit(caller, request)
    if trace is not None:
        trace.caller(caller.key.id, caller.tenant.id)
    try:
        serving = run(rt, request, caller, headers, trace)
        routed = await (serving if gate is None or klass is None
                        else prioritised(gate, klass, serving))
    except BaseException:
        await ticket.settle(None)  # nothing served: every reserved token goes back
        raise
    out = routed.headers | ticket.headers
    if routed.stream is not None:
        return Routed(out, stream=Metered(routed.stream, ticket, request.prompt_tokens))
    await ticket.settle(answer_tokens(request, routed.body))
    return Routed(out, body=routed.body)


async def prioritised(gate: PriorityGate, klass: PriorityClass,
                      serving: Coroutine[Any, Any, Routed]) -> Routed:
    """Run ``serving`` once ``gate`` gives a ``klass`` request a place (closing it unrun
    when refused: Overloaded, 503); the place is held until the answer ends (a stream's
    last chunk) and the first token is measured against the class's TTFT target."""
    try:
        slot = await gate.enter(klass)
    except BaseException:
        serving.close()
        raise
    try:
        routed = await serving
    except BaseException:
        slot.done()
        raise
    headers = routed.headers | {"x-llmroute-priority": klass.name}
    if routed.stream is None:
        slot.first_token()
        slot.done()
        return Routed(headers, body=routed.body)
    return Routed(headers, stream=slot.watch(routed.stream))


async def serve(rt: Runtime, request: ChatRequest, caller: Caller | None = None,
                headers: Mapping[str, str] = NO_HEADERS, trace: Recorder | None = None
                ) -> Routed:
    """Filter the input (``rt.content_filter``: a block match raises ContentFiltered, 400,
    before the gate), count tokens (``rt.tokens``: the real count near a context limit; may
    clamp ``max_tokens``; raises ContextLengthExceeded, 400, before the gate), decide
    (the strategy matched on ``headers`` too), dispatch with
    failover, filter the output (JSON or SSE), and describe the route in headers
    (``route_headers``, plus ``server-timing`` with the gate's time); every step is noted
    in ``trace`` (a throwaway one when None). Raises PermissionDenied
    (403) when the matched strategy (other than the built-in one) or the plan's pool is not
    one ``caller``'s key may use."""
    trace = trace or Recorder(request.request_id, request.request_id)
    screen = rt.content_filter
    if screen is not None:  # 400 content_filter before the gate; masks the prompt
        request = screen.check(request, trace)
    if rt.tokens is not None:  # 400 context_length_exceeded before the gate
        request = await rt.tokens.measure(request, context_limit(caller), trace)
    intent = await rt.gate.classify(request)
    timing = server_timing(trace.gate(intent))
    d = settle(rt, request, intent, explain=False, headers=headers, trace=trace,
               caller=caller)
    trial = d.strategy.trial
    if caller is not None and d.strategy.strategy_id != BUILTIN_ID:  # 403 before any engine
        caller.check_strategy(d.strategy.strategy_id if trial is None else trial.strategy_id)
    if trial is not None:
        return await _tried(rt, request, d, caller, trace, timing)
    return await _decided(rt, request, d, caller, trace, timing)


async def _decided(rt: Runtime, request: ChatRequest, d: Decision, caller: Caller | None,
                   trace: Recorder, timing: dict[str, str]) -> Routed:
    """``d`` served: by its strategy's runner, else by dispatch (see ``serve``); the answer
    passes the output filter (``_screened``)."""
    if d.strategy.runner is not None:
        return await run_strategy(rt, request, d, caller, trace, timing)
    if caller is not None:
        caller.check_pool(d.plan.pool)
    if request.stream:
        backend, stream = await dispatch.open_stream(rt.dispatch, request, d.plan,
                                                     d.candidates, trace)
        return _screened(rt, request, Routed(route_headers(request, d, backend) | timing,
                                             stream=stream), trace)
    backend, body = await dispatch.complete(rt.dispatch, request, d.plan, d.candidates, trace)
    return _screened(rt, request, Routed(route_headers(request, d, backend) | timing,
                                         body=body), trace)


async def _tried(rt: Runtime, request: ChatRequest, d: Decision, caller: Caller | None,
                 trace: Recorder, timing: dict[str, str]) -> Routed:
    """A split's or shadow's arm serves ``d``, its time and outcome recorded in
    ``rt.strategy.trials`` (a stream's at its end); a shadow's copy is sent first."""
    trial, stats = d.strategy.trial, rt.strategy.trials
    assert trial is not None
    trace.step("trial", strategy=trial.header, arm=trial.arm)
    if trial.shadow is not None:
        copy = _shadow_copy(rt, request, d, trial.shadow, caller)
        sent = stats.send(trial.strategy_id, trial.shadow.spec.strategy_id,
                          trial.max_in_flight, copy, verified)
        trace.step("shadow", to=trial.shadow.header, sent=sent)
    t0 = stats.clock()
    routed = await stats.timed(trial.strategy_id, trial.arm, _decided(
        rt, request, d, caller, trace, timing), verified, final=lambda r: r.stream is None)
    headers = routed.headers | {"x-llmroute-trial": trial.header, "x-llmroute-arm": trial.arm}
    if routed.stream is None:
        return Routed(headers, body=routed.body)
    return Routed(headers, stream=stats.watched(trial.strategy_id, trial.arm, t0,
                                                routed.stream))


async def _shadow_copy(rt: Runtime, request: ChatRequest, d: Decision, entry: Entry,
                       caller: Caller | None) -> Routed:
    """``entry`` (a shadow's candidate) serving a non-streamed copy of ``request`` on its
    own budget and trace (the copy's answer is the caller's to discard)."""
    copy = non_streamed(request)
    matched = Matched(entry.spec.strategy_id, entry.spec.version, entry.spec.kind,
                      entry.header, entry.strategy.plan(copy, d.intent), d.strategy.snapshot,
                      entry.runner)
    shadow = decision(rt, copy, d.intent, matched)
    trace = Recorder(f"{request.request_id}-shadow", request.request_id)
    return await _decided(rt, copy, shadow, caller, trace, {})


async def run_strategy(rt: Runtime, request: ChatRequest, d: Decision, caller: Caller | None,
                       trace: Recorder, timing: dict[str, str]) -> Routed:
    """Let the matched strategy serve the request itself (its legs share one attempt
    budget, each pool checked against ``caller``); a streamed request gets the runner's own
    stream, or the answer as SSE once it is complete; either way the answer passes the
    output filter (``_screened``). When the runner fails with a server error (5xx) and its
    strategy names a ``fallback_strategy``, that strategy serves the request on what is left
    of the budget (``x-llmroute-fallback-from`` names the failed one; a chain of fallbacks
    is followed, the loader refuses cycles); else the error stands."""
    assert d.strategy.runner is not None
    legs = PoolLegs(rt.dispatch, rt.backends,
                    lambda req, plan, explain=False: rank(rt, req, d.intent, plan,
                                                          explain=explain),
                    d.plan.max_attempts, trace, caller)
    failed: list[str] = []
    entry = _entry(d.strategy, d.strategy.strategy_id)
    who: tuple[Runner | None, str, Entry | None] = (d.strategy.runner, d.strategy.header,
                                                     entry)
    while True:
        try:
            return _screened(rt, request, await _run_one(rt, request, d, legs, who, timing,
                                                         failed), trace)
        except LLMRouteError as err:
            entry = _fallback_entry(d.strategy, who[2], err)
            if entry is None:
                raise
            trace.step("fallback", failed=who[1], to=entry.header, reason=err.message)
            failed.append(who[1])
            who = (entry.runner, entry.header, entry)


async def _run_one(rt: Runtime, request: ChatRequest, d: Decision, legs: PoolLegs,
                   who: tuple[Runner | None, str, Entry | None], timing: dict[str, str],
                   failed: list[str]) -> Routed:
    """One strategy (``who``: its runner, or None to dispatch its plan; header; entry)."""
    runner, header, entry = who
    trace = legs.trace
    common = {"x-request-id": request.request_id, "x-llmroute-intent": d.intent.label,
              "x-llmroute-strategy": header, **timing}
    if failed:
        common["x-llmroute-fallback-from"] = ", ".join(failed)
    if runner is None:
        assert entry is not None
        return await _dispatch_fallback(rt, request, d, legs, entry, common)
    served = await runner.serve(Run(request, d.intent, legs, trace, rt.wall_clock()))
    headers = {**common, **served.headers}
    if served.stream is not None:
        return Routed(headers, stream=served.stream)
    body = served.body
    if request.stream:
        trace.answered(body)
        return Routed(headers, stream=replay(request, body))
    return Routed(headers, body=body)


async def _dispatch_fallback(rt: Runtime, request: ChatRequest, d: Decision, legs: PoolLegs,
                             entry: Entry, common: dict[str, str]) -> Routed:
    """A fallback strategy that plans only: its plan on what is left of the budget."""
    if legs.left <= 0:
        raise NoBackendAvailable(f"the request's attempt budget is spent before its "
                                 f"fallback strategy {entry.header}")
    plan = entry.strategy.plan(request, d.intent)._replace(max_attempts=legs.left)
    fb = Decision(d.intent, plan, rank(rt, request, d.intent, plan, explain=False),
                  d.strategy)
    legs.check_pool(plan.pool)
    if request.stream:
        backend, stream = await dispatch.open_stream(rt.dispatch, request, plan,
                                                     fb.candidates, legs.trace)
        return Routed(common | _backend_headers(backend), stream=stream)
    backend, body = await dispatch.complete(rt.dispatch, request, plan, fb.candidates,
                                            legs.trace)
    return Routed(common | _backend_headers(backend), body=body)


def _screened(rt: Runtime, request: ChatRequest, routed: Routed, trace: Recorder) -> Routed:
    """``routed`` through the output filter (``rt.content_filter``, None: unchanged), its
    JSON answer or its SSE stream; a JSON answer is traced as it leaves the filter
    (``trace.answered``: what the client gets)."""
    screen = rt.content_filter
    if routed.stream is not None:
        if screen is None:
            return routed
        return Routed(routed.headers, stream=screen.stream(request, routed.stream, trace))
    if screen is not None:
        routed = Routed(routed.headers, body=screen.answer(request, routed.body, trace))
    trace.answered(routed.body)
    return routed


def _backend_headers(backend: Backend) -> dict[str, str]:
    return {"x-llmroute-backend": backend.id, "x-llmroute-pool": backend.pool}


def _entry(matched: Matched, strategy_id: str) -> Entry | None:
    """The entry of ``strategy_id`` in the set the request was matched against (the
    built-in one for its id), so a fallback runs on the versions the request started on."""
    snapshot = matched.snapshot
    if not isinstance(snapshot, StrategySet):
        return None
    return snapshot.builtin if strategy_id == BUILTIN_ID else snapshot.get(strategy_id)


def _fallback_entry(matched: Matched, failed: Entry | None, err: LLMRouteError) -> Entry | None:
    """The entry to fall back to from ``failed`` after ``err`` (server errors only)."""
    target = failed.spec.fallback_strategy if failed is not None else None
    if target is None or err.status < 500:
        return None
    return _entry(matched, target)


def server_timing(gate_ms: float) -> dict[str, str]:
    """The W3C Server-Timing header (https://www.w3.org/TR/server-timing/) with the gate's
    classification time, e.g. ``server-timing: gate;dur=3.214`` (ms): browsers' developer
    tools show it, and ``bench/overhead.py`` reads the gate's own time from it."""
    return {"server-timing": f"gate;dur={gate_ms:.3f}"}


def rank(rt: Runtime, request: ChatRequest, intent: Intent, plan: RoutePlan, *,
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
    uniform = len({b.context_length for b in named}) == 1
    primary = rt.profile.rank(ctx, named, limit=plan.max_attempts if uniform else None,
                              explain=explain)
    rest = [b for b in named if b.pool != plan.pool] + [rt.backends[b] for b in plan.fallback_ids]
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


def route_headers(request: ChatRequest, d: Decision, backend: Backend) -> dict[str, str]:
    """``x-request-id`` and the ``x-llmroute-*`` headers describing the decision
    (``x-llmroute-strategy: <strategy_id>@<version>``)."""
    return {"x-request-id": request.request_id, "x-llmroute-backend": backend.id,
            "x-llmroute-pool": backend.pool, "x-llmroute-intent": d.intent.label,
            "x-llmroute-strategy": d.strategy.header}
