"""Answer stages: what wraps a request's answer, each concern one stage, in one order.

The contract (``runtime.Stage``, over a ``Call``), three async hooks:

* ``before(call) -> Routed | None`` runs once the plan is ranked (``call.decision``), before
  the strategy answers. It notes what it needs on the Call, or answers early: a Routed
  returned here is the answer, nothing is sent, and the stages after this one are not
  entered.
* ``after(call, routed) -> Routed`` gets the answer on its way out, JSON ``body`` or SSE
  ``stream``, and returns it wrapped or changed (a stream is wrapped, never read here:
  what a stage does per chunk it does as the client reads). It runs for every stage
  entered, also around an early answer of a stage after it.
* ``failed(call, err)`` runs, for every stage, when the request fails at any step from
  admission on (``err``: what it raised): the stage gives back what it holds for the call,
  if anything.

A stage with nothing to do before the answer, or nothing to give back, sets that hook to
None (``before = None``): the runner skips it, so a stage costs no coroutine where it does
nothing.

``rt.stages`` is the order, outermost first: the befores run in it, the afters in reverse
(the innermost stage sees the engine's answer first), the failed hooks in reverse too. The
composition root builds it (``assemble/stages.answer_stages``), each built-in present only
when its part is configured:

    UsageMeter → PrioritySlot → CachedAnswer → TrialTiming → OutputFilter

so a stream reaches the client as relay → OutputFilter → TrialTiming → CachedAnswer →
PrioritySlot → UsageMeter (``CachedAnswer``, the answer cache, is ``flow/cache.py``). The
first two give back what ``admit`` took (the token reservation, the priority place — with
the answer cache on and the fleet saturated, the place is taken by ``CachedAnswer`` on a
miss instead: a hit takes none), so they stand first: every answer, an early one too,
passes them. To add
a stage (an answer cache, a cost meter): write a class with the three methods, give the
Call a field for what it holds per request, and place an instance in ``answer_stages``
(``tests/unit/flow/test_stages.py`` states the order).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from llmroute.flow.call import Call, Flow
from llmroute.flow.headers import priority_header, trial_headers
from llmroute.flow.rank import rank
from llmroute.flow.strategies import answer
from llmroute.observe.trace import Recorder
from llmroute.policy.filter import ContentFilter
from llmroute.policy.usage import Metered, answer_tokens, spent
from llmroute.strategy.answers import non_streamed
from llmroute.strategy.protocol import Matched
from llmroute.strategy.snapshot import Entry
from llmroute.strategy.trials import verified
from llmroute.types import ChatRequest, Routed


async def around(call: Call, serve: Flow) -> Routed:
    """``serve(call)`` inside the stages: each stage's ``before``, outermost first, until
    one answers early; ``serve`` unless one did; then the ``after`` of every stage entered
    (not the one that answered early, nor those after it), innermost first."""
    stages = call.rt.stages
    entered = 0
    routed = None
    for stage in stages:
        before = stage.before
        if before is not None and (routed := await before(call)) is not None:
            break
        entered += 1
    if routed is None:
        routed = await serve(call)
    while entered:
        entered -= 1
        routed = await stages[entered].after(call, routed)
    return routed


async def abandon(call: Call, err: BaseException) -> None:
    """``err`` ended the request from admission on: every stage's ``failed``, innermost
    first."""
    for stage in reversed(call.rt.stages):
        failed = stage.failed
        if failed is not None:
            await failed(call, err)


class UsageMeter:
    """Reconciles the admission's token reservation (``call.ticket``, taken by ``admit``)
    (and cost budgets: the cost the trace adds up, ``policy/usage.spent``) with the real usage:
    a JSON answer's now (``policy/usage.answer_tokens``), a stream's
    when it ends (``policy/usage.Metered``), nothing served when the request fails (every
    reserved token goes back); adds the ``x-ratelimit-*`` headers."""

    before = None  # ``admit`` reserved

    async def after(self, call: Call, routed: Routed) -> Routed:
        """Settle (JSON) or meter the stream."""
        ticket = call.ticket
        if ticket is None:
            return routed
        headers = routed.headers | ticket.headers
        if routed.stream is not None:
            return Routed(headers, stream=Metered(routed.stream, ticket,
                                                   call.request.prompt_tokens, call.trace))
        await ticket.settle(answer_tokens(call.request, routed.body), spent(call.trace))
        return Routed(headers, body=routed.body)

    async def failed(self, call: Call, err: BaseException) -> None:
        """Nothing served: give every reserved token back (once); charge what the
        attempts that streamed before failing cost."""
        if call.ticket is not None:
            await call.ticket.settle(None, spent(call.trace))


class PrioritySlot:
    """The request's place under the priority gate (``call.slot``, ``policy/priority.py``:
    taken by ``admit``, waited for while the fleet is saturated): held until the answer
    ends (a stream's last chunk), the first token measured against the class's TTFT
    target; ``x-llmroute-priority`` names the class."""

    before = None  # ``admit`` took the place

    async def after(self, call: Call, routed: Routed) -> Routed:
        """Hand the place to the stream, or free it after a JSON answer."""
        slot = call.slot
        if slot is None:  # no class, or a cache hit that took no place
            return routed if call.klass is None else Routed(
                routed.headers | priority_header(call.klass), routed.body, routed.stream)
        headers = routed.headers | priority_header(slot.klass)
        if routed.stream is not None:
            return Routed(headers, stream=slot.watch(routed.stream))
        slot.first_token()
        slot.done()
        return Routed(headers, body=routed.body)

    async def failed(self, call: Call, err: BaseException) -> None:
        """Free the place (once)."""
        if call.slot is not None:
            call.slot.done()


class TrialTiming:
    """A split's or shadow's arm (``call.matched.trial``) timed and its outcome recorded
    (``strategy/trials.py``: a JSON answer's now, a stream's at its end, a server error as
    the arm's error); a shadow's copy is sent in the background first (at most its
    ``max_in_flight`` at once); ``x-llmroute-trial`` and ``x-llmroute-arm`` name them.
    Does nothing for a request no trial matched."""

    async def before(self, call: Call) -> Routed | None:
        """Send the shadow's copy, start the arm's clock (``call.trial_t0``)."""
        trial = call.matched.trial if call.matched is not None else None
        if trial is None:
            return None
        stats = call.rt.strategy.trials
        call.trace.step("trial", strategy=trial.header, arm=trial.arm)
        if trial.shadow is not None:
            sent = stats.send(trial.strategy_id, trial.shadow.spec.strategy_id,
                              trial.max_in_flight, _shadow_copy(call, trial.shadow), verified)
            call.trace.step("shadow", to=trial.shadow.header, sent=sent)
        call.trial_t0 = stats.clock()
        return None

    async def after(self, call: Call, routed: Routed) -> Routed:
        """Record a JSON answer; time a stream to its end."""
        t0 = call.trial_t0
        if t0 is None or call.matched is None or call.matched.trial is None:
            return routed
        trial, stats = call.matched.trial, call.rt.strategy.trials
        call.trial_t0 = None  # recorded here or by the stream: never again by ``failed``
        headers = routed.headers | trial_headers(trial)
        if routed.stream is not None:
            return Routed(headers, stream=stats.watched(trial.strategy_id, trial.arm, t0,
                                                        routed.stream))
        stats.record(trial.strategy_id, trial.arm, stats.clock() - t0, True, verified(routed))
        return Routed(headers, body=routed.body)

    async def failed(self, call: Call, err: BaseException) -> None:
        """Record a server error as the arm's error (``TrialStats.failed``)."""
        t0 = call.trial_t0
        if t0 is not None and call.matched is not None and call.matched.trial is not None:
            trial = call.matched.trial
            call.rt.strategy.trials.failed(trial.strategy_id, trial.arm, t0, err)


class OutputFilter:
    """The answer through the sensitive-word ``screen`` (``policy/filter.py``): a JSON
    answer's text now, a stream's as it passes. Chat and completions answers only."""

    def __init__(self, screen: ContentFilter):
        self._screen = screen

    before = failed = None  # nothing to do before the answer, nothing held

    async def after(self, call: Call, routed: Routed) -> Routed:
        """Filter the answer."""
        if call.request.endpoint == "embeddings":
            return routed
        return filtered(self._screen, call.request, routed, call.trace)


def filtered(screen: ContentFilter, request: ChatRequest, routed: Routed, trace: Recorder
             ) -> Routed:
    """``routed`` (an answer to ``request``) through ``screen``, its JSON body or its SSE
    stream."""
    if routed.stream is not None:
        return Routed(routed.headers, stream=screen.stream(request, routed.stream, trace))
    return Routed(routed.headers, body=screen.answer(request, routed.body, trace))


def _shadow_copy(call: Call, entry: Entry) -> Coroutine[Any, Any, Routed]:
    """``entry`` (a shadow's candidate) serving a non-streamed copy of the call's request
    on its own budget and trace, through the output filter when there is one (the copy's
    answer is the caller's to discard)."""
    async def copy() -> Routed:
        assert call.matched is not None and call.intent is not None
        request = non_streamed(call.request)
        shadow = Call(call.rt, request, call.caller, trace=Recorder(
            f"{request.request_id}-shadow", request.request_id))
        shadow.intent = call.intent
        shadow.matched = Matched(entry.spec.strategy_id, entry.spec.version, entry.spec.kind,
                                 entry.header, entry.strategy.plan(request, call.intent),
                                 call.matched.snapshot, entry.runner)
        rank(shadow)
        routed = await answer(shadow)
        screen = call.rt.content_filter
        return routed if screen is None else filtered(screen, request, routed, shadow.trace)
    return copy()
