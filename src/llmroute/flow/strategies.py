"""The strategy runner: the matched strategy answers a ranked call, by dispatch of its plan
or by its runner (the kinds that serve a request themselves), following its fallback chain.

A split's or shadow's arm is served the same way; what a trial adds (the arm's timing, the
shadow's copy) is an answer stage (``flow/stages.py``).
"""

from __future__ import annotations

from llmroute.dispatch import Budget, asks_logprobs, send
from llmroute.errors import LLMRouteError, NoBackendAvailable
from llmroute.flow.call import Call
from llmroute.flow.headers import backend_headers, route_headers, strategy_headers
from llmroute.flow.legs import PoolLegs
from llmroute.flow.rank import rank_plan
from llmroute.strategy.answers import replay
from llmroute.strategy.protocol import Matched, Run, Runner
from llmroute.strategy.snapshot import BUILTIN_ID, Entry, StrategySet
from llmroute.types import Routed

Who = tuple[Runner | None, str, Entry | None]
"""The strategy serving now: its runner (None: dispatch its plan), header and entry."""


async def answer(call: Call) -> Routed:
    """``call`` (ranked: ``call.decision``) served by its strategy's runner (``run``), else
    by dispatch of its plan; the route in the headers (``headers.route_headers``). Raises
    PermissionDenied (403) when the caller may not use the plan's pool, and as
    ``dispatch.send`` does."""
    d = call.decision
    assert d is not None
    if d.strategy.runner is not None:
        return await run(call)
    if call.caller is not None:
        call.caller.check_pool(d.plan.pool)
    sent = await send(call.rt.dispatch, call.request, d.plan,
                      Budget(d.candidates, d.plan.max_attempts, call.trace))
    return Routed(route_headers(call, sent.backend), sent.body, sent.stream)


async def run(call: Call) -> Routed:
    """Let the matched strategy serve the request itself (its legs share one attempt
    budget, each pool checked against the caller); a streamed request gets the runner's
    own stream, or the answer as SSE once it is complete. When the runner fails with a
    server error (5xx) and its strategy names a ``fallback_strategy``, that strategy serves
    the request on what is left of the budget (``x-llmroute-fallback-from`` names the
    failed one; a chain of fallbacks is followed, the loader refuses cycles); else the
    error stands."""
    d = call.decision
    assert d is not None and call.intent is not None
    matched = d.strategy
    legs = PoolLegs(call.rt, call.intent, d.plan.max_attempts, call.trace, call.caller,
                    asks_logprobs(call.request))
    failed: list[str] = []
    who: Who = (matched.runner, matched.header, _entry(matched, matched.strategy_id))
    while True:
        try:
            return await _run_one(call, legs, who, failed)
        except LLMRouteError as err:
            entry = _fallback_entry(matched, who[2], err)
            if entry is None:
                raise
            call.trace.step("fallback", failed=who[1], to=entry.header, reason=err.message)
            failed.append(who[1])
            who = (entry.runner, entry.header, entry)


async def _run_one(call: Call, legs: PoolLegs, who: Who, failed: list[str]) -> Routed:
    """One strategy (``who``) serving ``call`` after those in ``failed`` failed."""
    runner, header, entry = who
    common = strategy_headers(call, header, failed)
    if runner is None:
        assert entry is not None
        return await _dispatch_fallback(call, legs, entry, common)
    assert call.intent is not None
    request = call.request
    served = await runner.serve(Run(request, call.intent, legs, call.trace,
                                    call.rt.wall_clock()))
    headers = {**common, **served.headers}
    if served.stream is not None:
        return Routed(headers, stream=served.stream)
    body = served.body
    if request.stream:
        call.trace.answered(body)
        return Routed(headers, stream=replay(request, body))
    return Routed(headers, body=body)


async def _dispatch_fallback(call: Call, legs: PoolLegs, entry: Entry,
                             common: dict[str, str]) -> Routed:
    """A fallback strategy that plans only: its plan on what is left of the budget."""
    if legs.left <= 0:
        raise NoBackendAvailable(f"the request's attempt budget is spent before its "
                                 f"fallback strategy {entry.header}")
    assert call.intent is not None
    request = call.request
    plan = entry.strategy.plan(request, call.intent)._replace(max_attempts=legs.left)
    candidates = rank_plan(call.rt, request, call.intent, plan, explain=False)
    legs.check_pool(plan.pool)
    sent = await send(call.rt.dispatch, request, plan,
                      Budget(candidates, plan.max_attempts, legs.trace))
    return Routed(common | backend_headers(sent.backend), sent.body, sent.stream)


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
