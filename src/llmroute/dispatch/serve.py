"""The two ways to serve a ranked request: ``complete`` (JSON) and ``open_stream`` (SSE).

The pool's degradation tier (``fuse/degrade.py``) applies first; then the candidates are
tried within one per-request attempt budget (``attempt.Budget``), failing over before the
first byte (``failover.py``) and, for streams, handing off after it (``relay.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

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
from llmroute.observe.trace import Recorder
from llmroute.types import Backend, Candidate, ChatRequest, RoutePlan


async def complete(deps: Deps, request: ChatRequest, plan: RoutePlan,
                   candidates: list[Candidate], trace: Recorder | None = None
                   ) -> tuple[Backend, dict[str, Any]]:
    """Non-streamed request with failover; returns the backend used and its answer (the
    engine's JSON, or the pool's canned answer). Raises as ``with_failover`` does, or
    NoBackendAvailable when the degraded pool sheds, InvalidRequest as ``check_logprobs``
    and ``choice_capable`` (n > 1 only to backends that answer several choices).
    A legacy completion answered in the chat shape is converted (``fuse/shape.py``). Each
    call is bounded by its backend's TTFT once the collector sees the engine frozen
    (``watchdog.py``); a backend whose engine kind has no metrics endpoint is never polled,
    so never dark, and its calls run without the watchdog's timer."""
    async def call(backend: Backend) -> dict[str, Any]:
        answer = deps.client.complete(backend, request.endpoint, request.body,
                                      request.request_id)
        if engine_kind(backend.engine).metrics is None:
            return await answer
        return await bounded(answer, backend.id, deps.client.ttft_s(backend),
                             deps.stats.dark, deps.clock)

    ordered = degrade(deps, plan, candidates, request.request_id)
    if ordered is None:
        return canned_backend(plan.pool), canned_completion(
            request, deps.fuse.degradation[plan.pool], int(deps.wall_clock()))
    check_logprobs(request, ordered)
    ordered = choice_capable(request, ordered)
    attempt, answer = await with_failover(deps, plan, Budget(ordered, plan.max_attempts, trace),
                                          call, request.prompt_tokens,
                                          pending_prefill(deps, request), request.body)
    attempt.succeed(output_tokens=_completion_tokens(answer))
    stops = pending_stops(request.body, deps.client.learned, attempt.backend) \
        if isinstance(request.body.get("stop"), list) else None
    if stops is not None:  # its engine took the first stop only: the rest are cut here
        answer = cut_answer(answer, stops)
    if request.endpoint == "completions":
        answer = text_completion(answer)
    return attempt.backend, answer


async def open_stream(deps: Deps, request: ChatRequest, plan: RoutePlan,
                      candidates: list[Candidate], trace: Recorder | None = None
                      ) -> tuple[Backend, AsyncIterator[bytes]]:
    """Streamed request with failover until the first chunk; returns the first backend and
    the SSE byte stream for the client (which ends with ``[DONE]`` or an OpenAI error
    event), handing off mid-stream as the fuse decides. Raises as ``complete`` does."""
    ordered = degrade(deps, plan, candidates, request.request_id)
    if ordered is None:
        chunks = canned_chunks(request, deps.fuse.degradation[plan.pool],
                               int(deps.wall_clock()))
        return canned_backend(plan.pool), _replay(chunks)
    check_logprobs(request, ordered)
    relay = Relay(deps, request, plan, Budget(ordered, plan.max_attempts, trace))
    relay.prewarm()  # with fuse.prewarm the fallback prefills while the primary does
    try:
        attempt = (await relay.open_leg()).attempt
    except BaseException:
        relay.stop_warm()
        raise
    return attempt.backend, relay.stream()


def check_logprobs(request: ChatRequest, candidates: list[Candidate]) -> None:
    """Raise InvalidRequest (400, ``param: logprobs``) when the request asks for logprobs
    (chat: ``logprobs: true``; legacy completions: an integer ``logprobs``) and no candidate
    can give them (``capabilities``, else the engine kind's defaults), rather than answer
    with a silent ``logprobs: null``."""
    lp = request.body.get("logprobs")
    asked = lp is True if request.endpoint == "chat" else \
        isinstance(lp, int) and not isinstance(lp, bool)
    if asked and not any("logprobs" in capabilities_of(c.backend) for c in candidates):
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
