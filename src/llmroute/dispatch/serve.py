"""The one door into dispatch: ``send`` serves a ranked request, JSON or SSE, for every
caller (a plain request, each leg of a strategy, an embeddings request).

The pool's degradation tier (``fuse/degrade.py``) applies first, then the capability checks
(``logprobs``, ``n``); then the budget's candidates are tried within the request's one
attempt budget (``attempt.Budget``), failing over before the first byte (``failover.py``),
a non-streamed call cut by the frozen-engine watchdog (``watchdog.py``) and a stream handed
off after its first byte (``relay.py``). Each attempt tells the prefix index which backend
is sent the prompt (``failover.pending_prefill``, ``anchor/prefix.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any, NamedTuple

from llmroute.backends.engines import capabilities_of, engine_kind
from llmroute.backends.sse import DONE, encode_json
from llmroute.dispatch.attempt import Budget
from llmroute.dispatch.deps import Deps
from llmroute.dispatch.failover import pending_prefill, with_failover
from llmroute.dispatch.relay import Relay
from llmroute.dispatch.watchdog import bounded
from llmroute.fuse.degrade import (
    canned_backend,
    canned_chunks,
    canned_completion,
    pool_health,
    tiered,
)
from llmroute.errors import InvalidRequest
from llmroute.fuse.shape import text_completion
from llmroute.fuse.stops import cut_answer, pending_stops
from llmroute.types import Backend, Candidate, ChatRequest, RoutePlan


class Sent(NamedTuple):
    """What ``send`` brings back: the ``backend`` that answered (``canned`` for a degraded
    pool's canned answer) and the engine's JSON ``body`` (a non-streamed request) or the
    client's SSE byte ``stream`` (ending with ``[DONE]`` or an OpenAI error event)."""

    backend: Backend
    body: dict[str, Any] | None = None
    stream: AsyncIterator[bytes] | None = None


async def send(deps: Deps, request: ChatRequest, plan: RoutePlan, budget: Budget, *,
               optional_logprobs: bool = False) -> Sent:
    """Serve ``request`` (streamed or not, as ``request.stream`` says) on ``budget``'s
    candidates for ``plan`` (its pool's degradation tier applies). Each attempt spends from
    ``budget``, which the caller may share between legs (``budget.left`` is what is left).
    ``optional_logprobs``: the request asks for logprobs only where a backend gives them (a
    strategy's own ask, which it copes without), so their absence is no 400.

    Raises InvalidRequest (400) as ``check_logprobs`` and ``choice_capable`` do,
    NoBackendAvailable (503) when the degraded pool sheds, and as ``with_failover`` does
    (the engine's own 4xx, 429, 503, 504)."""
    if plan.pool in deps.fuse.degradation:  # a pool without tiers is never degraded
        ordered = degrade(deps, plan, budget.queue, request.request_id)
        if ordered is None:
            return _canned(deps, request, plan)
        budget.queue = ordered
    body = request.body  # the capability checks, only for a request that asks
    if "logprobs" in body and not optional_logprobs:
        check_logprobs(request, budget.queue)
    if request.stream:
        return await _open_stream(deps, request, plan, budget)
    if "n" in body:
        budget.queue = choice_capable(request, budget.queue)

    def call(backend: Backend) -> Awaitable[dict[str, Any]]:
        """The engine call to await (no coroutine of its own around it), bounded by the
        backend's TTFT once the collector sees its engine frozen (``watchdog.py``); a
        backend whose engine kind has no metrics endpoint is never polled, so never dark:
        its calls run without the watchdog's timer."""
        answer = deps.client.complete(backend, request.endpoint, request.body,
                                      request.request_id)
        if engine_kind(backend.engine).metrics is None:
            return answer
        return bounded(answer, backend.id, deps.client.ttft_s(backend),
                       deps.stats.dark, deps.clock)

    attempt, answer = await with_failover(deps, plan, budget, call, request.prompt_tokens,
                                          pending_prefill(deps, request), request.body)
    attempt.usage(answer.get("usage"))
    attempt.succeed(output_tokens=_completion_tokens(answer))
    stops = pending_stops(request.body, deps.client.learned, attempt.backend) \
        if isinstance(request.body.get("stop"), list) else None
    if stops is not None:  # its engine took the first stop only: the rest are cut here
        answer = cut_answer(answer, stops)
    if request.endpoint == "completions":  # a legacy completion answered in the chat shape
        answer = text_completion(answer)
    return Sent(attempt.backend, body=answer)


async def _open_stream(deps: Deps, request: ChatRequest, plan: RoutePlan, budget: Budget
                       ) -> Sent:
    """Streamed, with failover until the first chunk; the stream hands off mid-answer as
    the fuse decides (``relay.py``)."""
    relay = Relay(deps, request, plan, budget)
    relay.prewarm()  # with fuse.prewarm the fallback prefills while the primary does
    try:
        attempt = (await relay.open_leg()).attempt
    except BaseException:
        relay.stop_warm()
        raise
    return Sent(attempt.backend, stream=relay.stream())


def _canned(deps: Deps, request: ChatRequest, plan: RoutePlan) -> Sent:
    """The degraded pool's canned answer, JSON or SSE."""
    config, created = deps.fuse.degradation[plan.pool], int(deps.wall_clock())
    if request.stream:
        return Sent(canned_backend(plan.pool),
                    stream=_replay(canned_chunks(request, config, created)))
    return Sent(canned_backend(plan.pool), body=canned_completion(request, config, created))


def asks_logprobs(request: ChatRequest) -> bool:
    """Whether ``request`` asks for logprobs (chat: ``logprobs: true``; legacy completions:
    an integer ``logprobs``)."""
    lp = request.body.get("logprobs")
    if request.endpoint == "chat":
        return lp is True
    return isinstance(lp, int) and not isinstance(lp, bool)


def check_logprobs(request: ChatRequest, candidates: list[Candidate]) -> None:
    """Raise InvalidRequest (400, ``param: logprobs``) when the request asks for logprobs
    (chat: ``logprobs: true``; legacy completions: an integer ``logprobs``) and no candidate
    can give them (``capabilities``, else the engine kind's defaults), rather than answer
    with a silent ``logprobs: null``."""
    if asks_logprobs(request) and \
            not any("logprobs" in capabilities_of(c.backend) for c in candidates):
        raise InvalidRequest("logprobs were asked for, but no backend that can serve this "
                             "request gives them", param="logprobs",
                             code="logprobs_unsupported")


def choice_capable(request: ChatRequest, candidates: list[Candidate]) -> list[Candidate]:
    """``candidates`` that can answer the request's ``n`` choices (all of them for n ≤ 1;
    for n > 1 those with the ``n`` capability, order kept). Raises InvalidRequest (400,
    ``param: n``) when none can."""
    n = request.body.get("n")
    if not isinstance(n, int) or n <= 1:
        return candidates
    able = [c for c in candidates if "n" in capabilities_of(c.backend)]
    if not able:
        raise InvalidRequest(f"n = {n} choices were asked for, but no backend that can serve "
                             "this request answers more than one; send n separate requests",
                             param="n", code="n_unsupported")
    return able


def degrade(deps: Deps, plan: RoutePlan, candidates: list[Candidate],
            request_id: str | None = None) -> list[Candidate] | None:
    """``candidates`` under the plan pool's degradation tier (``fuse/degrade.py``); None
    for the canned answer. Raises NoBackendAvailable (503 with Retry-After) when shedding."""
    config = deps.fuse.degradation.get(plan.pool)
    if config is None:  # a pool without tiers is never degraded: no health to compute
        return candidates
    health = pool_health(deps.breaker, deps.pools.get(plan.pool, ()), deps.clock())
    return tiered(candidates, plan.pool, health, config, request_id)


async def _replay(chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield encode_json(chunk)
    yield DONE


def _completion_tokens(answer: dict[str, Any]) -> int | None:
    """``usage.completion_tokens`` of a non-streamed answer, when the engine sent it."""
    usage = answer.get("usage")
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return n if isinstance(n, int) and n >= 0 else None
