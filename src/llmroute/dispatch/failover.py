"""Failover before the first byte: ``with_failover`` tries the budget's candidates in order
(connect errors, timeouts, 429, 5xx and context-length refusals move on; another 4xx is the
client's answer; a context-length refusal, in any engine's words, moves on only to larger
contexts and never blames the breaker), one ``Attempt`` each, with jittered back-off between
failures."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

from llmroute.dispatch.adapt import adapted
from llmroute.dispatch.attempt import Attempt, Budget
from llmroute.dispatch.deps import Deps
from llmroute.errors import (
    BackendError,
    ContextLengthExceeded,
    LLMRouteError,
    NoBackendAvailable,
    RateLimited,
    UpstreamStatusError,
    UpstreamTimeout,
)
from llmroute.fuse.retry import backoff_s, is_context_overflow
from llmroute.types import Backend, Candidate, ChatRequest, RoutePlan

T = TypeVar("T")
log = structlog.get_logger("llmroute.dispatch")


def blame_later(err: BackendError) -> bool:
    """An HTTP 500 with a JSON error body means the engine ran and rejected *this request*
    (llama.cpp answers 500 to a malformed ``tools`` list, for example). Such a failure counts
    against the breaker only once another backend has shown the request was servable, so
    one client's bad requests cannot open every breaker."""
    return isinstance(err, UpstreamStatusError) and err.upstream_status == 500 \
        and err.body is not None


def pending_prefill(deps: Deps, request: ChatRequest, extra: int = 0
                    ) -> Callable[[str], int]:
    """``backend_id -> prompt tokens (plus ``extra``) it must prefill``, called as each
    attempt begins: the prompt less what the backend is expected to hold in its prefix
    cache; the prefix index learns that the backend holds the prompt now
    (``anchor/prefix.py``: ``Affinity.dispatched``)."""
    tokens = request.prompt_tokens + extra
    return lambda backend_id: deps.affinity.dispatched(request, backend_id, tokens)


async def with_failover(deps: Deps, plan: RoutePlan, budget: Budget,
                        call: Callable[[Backend], Awaitable[T]], prompt_tokens: int = 0,
                        pending: Callable[[str], int] | None = None,
                        body: dict[str, Any] | None = None) -> tuple[Attempt, T]:
    """``call`` the budget's candidates in order until one succeeds, with jittered back-off
    between failures; each attempt counts ``prompt_tokens`` as pending prefill (with
    ``pending``, ``pending(backend_id)``: the part the backend has not cached). A
    context-length refusal moves on to larger-context candidates only; a 429's
    ``Retry-After`` holds that backend's breaker open; an engine's refusal of a shape the
    request ``body`` had (``dispatch/adapt.py``; None: no adaptation) sends it to the same
    backend once more, reshaped, at no cost to the budget. Returns the successful (unsettled)
    attempt and what ``call`` returned.

    Raises the first non-retryable BackendError as is (a 4xx from the engine),
    ContextLengthExceeded when a context refusal leaves no larger context (an engine's 400
    as is), UpstreamTimeout (504) when every attempt timed out, RateLimited (429) when
    every attempt was rate-limited, or NoBackendAvailable when every attempt failed or there
    is no candidate.
    """
    errors: list[BackendError] = []
    suspects: list[Attempt] = []
    while (cand := budget.take()) is not None:
        if errors:
            await asyncio.sleep(backoff_s(deps.retry, len(errors), deps.rng, errors[-1]))
        tokens = prompt_tokens if pending is None else pending(cand.backend.id)
        attempt = Attempt.begin(deps, cand.backend, tokens, budget.trace)
        try:
            result = await call(cand.backend)
        except BackendError as err:
            overflow = is_context_overflow(err)
            later = blame_later(err) and not overflow
            attempt.fail(err, to_breaker=not later and not overflow)
            log.warning("attempt_failed", backend=cand.backend.id, error=err.message,
                        detail=err.detail, request_id=budget.request_id)
            _note_retry_after(deps, err)
            if overflow:
                _keep_larger_context(budget, cand, err)
            elif not err.retryable:
                if body is not None and adapted(deps, budget, cand.backend, body, err):
                    budget.put_back(cand)
                    continue
                raise
            errors.append(err)
            suspects += [attempt] if later else []
            continue
        except BaseException:
            attempt.fail(None)
            raise
        _blame(suspects)
        return attempt, result
    raise _exhausted(plan, errors, suspects)


def _keep_larger_context(budget: Budget, cand: Candidate, err: BackendError) -> None:
    """After a context-length refusal only larger-context candidates are left. Raises when
    there is none: an engine's own 400 as is, any other refusal as ContextLengthExceeded."""
    if budget.keep_larger_context(cand.backend.context_length):
        return
    if isinstance(err, UpstreamStatusError) and err.upstream_status == 400:
        raise err
    raise ContextLengthExceeded(f"no backend has the context this request needs: "
                                f"{err.message}") from err


def _note_retry_after(deps: Deps, err: BackendError) -> None:
    if isinstance(err, UpstreamStatusError) and err.upstream_status == 429 \
            and err.retry_after_s:
        deps.breaker.hold(err.backend_id, err.retry_after_s, deps.clock())


def _blame(attempts: list[Attempt]) -> None:
    for a in attempts:
        a.blame()


def _exhausted(plan: RoutePlan, errors: list[BackendError],
               suspects: list[Attempt]) -> LLMRouteError:
    """The error for a request no attempt served. When every attempt was an HTTP 500 with an
    error body, the request itself is the likely cause: the engine's answer is returned
    (502) and no breaker is blamed; otherwise the suspects are blamed and the answer is 503,
    504 (UpstreamTimeout) when every attempt timed out, or 429 (RateLimited, with the
    engines' largest Retry-After) when every attempt was rate-limited."""
    if errors and len(suspects) == len(errors):
        return UpstreamStatusError(f"every backend rejected this request: {errors[0].message}",
                                   upstream_status=502, body=None,
                                   backend_id=errors[0].backend_id)
    _blame(suspects)
    detail = "; ".join(e.message for e in errors) or "no backend fits this request"
    if errors and all(_rate_limited(e) for e in errors):
        return RateLimited(f"every backend of pool {plan.pool} is rate-limited: {detail}",
                           retry_after_s=retry_after_hint(errors))
    timeouts = [e for e in errors if isinstance(e, UpstreamTimeout)]
    if timeouts and len(timeouts) == len(errors):
        return UpstreamTimeout(f"no backend of pool {plan.pool} answered in time: {detail}",
                               phase=timeouts[-1].phase, backend_id=timeouts[-1].backend_id)
    return NoBackendAvailable(f"no backend could serve pool {plan.pool}: {detail}",
                              retry_after_s=retry_after_hint(errors))


def _rate_limited(err: BackendError) -> bool:
    return isinstance(err, UpstreamStatusError) and err.upstream_status == 429


def retry_after_hint(errors: list[BackendError]) -> float:
    """Seconds a client should wait: the largest upstream Retry-After, else 1 s."""
    hints = [getattr(e, "retry_after_s", None) for e in errors]
    return max([h for h in hints if h] or [1.0])
