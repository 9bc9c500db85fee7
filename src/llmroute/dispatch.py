"""Dispatch: send a request to the anchor's candidates in order, failing over before the
first byte (connect errors, timeouts, 429, 5xx, context-length refusals) and handing off
after it (the result fuse, ``relay.py``), all within one per-request attempt budget; the
pool's degradation tier (``fuse/degrade.py``) applies first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from llmroute.anchor.stats.router import PrefillTicket
from llmroute.backends.sse import DONE, encode_json
from llmroute.errors import (
    BackendError,
    LLMRouteError,
    NoBackendAvailable,
    UpstreamStatusError,
)
from llmroute.fuse.degrade import (
    canned_backend,
    canned_chunks,
    canned_completion,
    pool_health,
    tiered,
)
from llmroute.fuse.retry import backoff_s, is_context_overflow
from llmroute.relay import Relay
from llmroute.runtime import Runtime
from llmroute.types import Backend, Candidate, ChatRequest, Outcome, RoutePlan

T = TypeVar("T")
log = structlog.get_logger("llmroute.dispatch")


@dataclass
class Attempt:
    """Accounting for one request on one backend: in-flight, latency, TTFT, breaker."""

    rt: Runtime
    backend: Backend
    started: float
    output_tokens: int = 0
    ticket: PrefillTicket | None = None

    @classmethod
    def begin(cls, rt: Runtime, backend: Backend, prompt_tokens: int = 0) -> Attempt:
        """Count a request as in flight on ``backend`` (a half-open breaker's probe), its
        ``prompt_tokens`` as pending prefill there until its first token."""
        now = rt.clock()
        rt.breaker.begin(backend.id, now)
        return cls(rt, backend, now, ticket=rt.stats.sent(backend.id, prompt_tokens, now))

    def first_token(self) -> None:
        """The first token arrived: the prompt is no longer pending, and the time since
        ``begin`` (the TTFT) teaches the backend's TTFT model."""
        if self.ticket is not None:
            self.rt.stats.prefill_ended(self.ticket, self.rt.clock(), first_token=True)
            self.ticket = None

    def _take_ticket(self) -> PrefillTicket | None:
        """The pending-prefill ticket, handed to ``finished`` (which ends it) only once."""
        ticket, self.ticket = self.ticket, None
        return ticket

    def succeed(self, ttft_s: float | None = None, output_tokens: int | None = None) -> None:
        """The request completed; records end-to-end latency (and TTFT for streams) and the
        output tokens (``output_tokens``, else the streamed chunks counted in the field)."""
        now = self.rt.clock()
        ttft_ms = None if ttft_s is None else ttft_s * 1000
        self.rt.stats.finished(self.backend.id, now, ok=True,
                               latency_ms=(now - self.started) * 1000, ttft_ms=ttft_ms,
                               output_tokens=output_tokens or self.output_tokens or None,
                               ticket=self._take_ticket())
        self.rt.breaker.record(self.backend.id, Outcome.SUCCESS, now)

    def fail(self, err: BaseException | None, *, to_breaker: bool = True) -> None:
        """The request failed (``err``) or was abandoned (None: client gone, or handed off
        by the entropy trigger). A retryable failure counts against the breaker unless
        ``to_breaker`` is False (see ``blame_later``)."""
        now = self.rt.clock()
        self.rt.stats.finished(self.backend.id, now, ok=err is None, ticket=self._take_ticket())
        if to_breaker and isinstance(err, BackendError) and err.retryable:
            self.blame()
        else:
            self.rt.breaker.release(self.backend.id)

    def blame(self) -> None:
        """Count one failure against this backend's circuit breaker."""
        self.rt.breaker.record(self.backend.id, Outcome.FAILURE, self.rt.clock())


class Budget:
    """The request's one attempt budget: at most ``max_attempts`` attempts (``RoutePlan``)
    shared by pre-first-byte retries and mid-stream handoffs, over ``candidates`` in order,
    each backend at most once."""

    def __init__(self, candidates: list[Candidate], max_attempts: int):
        self._queue = list(candidates)
        self.left = max_attempts

    def take(self) -> Candidate | None:
        """The next candidate, spending one attempt; None when the budget is spent."""
        if self.left <= 0 or not self._queue:
            return None
        self.left -= 1
        return self._queue.pop(0)

    def peek(self, skip: int = 0) -> Candidate | None:
        """The candidate after the next ``skip`` ones, without spending an attempt; None
        when the budget cannot reach it."""
        if self.left <= skip or len(self._queue) <= skip:
            return None
        return self._queue[skip]

    @property
    def exhausted(self) -> bool:
        """True when no further attempt is possible."""
        return self.left <= 0 or not self._queue

    def keep_larger_context(self, context_length: int) -> bool:
        """Drop candidates whose context (tokens) is not above ``context_length``; True when
        some candidate is left."""
        self._queue = [c for c in self._queue if c.backend.context_length > context_length]
        return bool(self._queue)


def blame_later(err: BackendError) -> bool:
    """An HTTP 500 with a JSON error body means the engine ran and rejected *this request*
    (llama.cpp answers 500 to a malformed ``tools`` list, for example). Such a failure counts
    against the breaker only once another backend has shown the request was servable, so
    one client's bad requests cannot open every breaker."""
    return isinstance(err, UpstreamStatusError) and err.upstream_status == 500 \
        and err.body is not None


async def with_failover(rt: Runtime, plan: RoutePlan, budget: Budget,
                        call: Callable[[Backend], Awaitable[T]], prompt_tokens: int = 0
                        ) -> tuple[Attempt, T]:
    """``call`` the budget's candidates in order until one succeeds, with jittered back-off
    between failures; each attempt counts ``prompt_tokens`` as pending prefill. A
    context-length refusal moves on to larger-context candidates only; a 429's
    ``Retry-After`` holds that backend's breaker open.

    Raises the first non-retryable BackendError as is (a 4xx from the engine), or
    NoBackendAvailable when every attempt failed or there is no candidate.
    """
    errors: list[BackendError] = []
    suspects: list[Attempt] = []
    while (cand := budget.take()) is not None:
        if errors:
            await asyncio.sleep(backoff_s(rt.config.retry, len(errors), rt.rng, errors[-1]))
        attempt = Attempt.begin(rt, cand.backend, prompt_tokens)
        try:
            result = await call(cand.backend)
        except BackendError as err:
            later = blame_later(err)
            attempt.fail(err, to_breaker=not later)
            log.warning("attempt_failed", backend=cand.backend.id, error=err.message)
            _note_retry_after(rt, err)
            if not err.retryable and not _wider_context(budget, cand, err):
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


def _wider_context(budget: Budget, cand: Candidate, err: BackendError) -> bool:
    return is_context_overflow(err) and budget.keep_larger_context(cand.backend.context_length)


def _note_retry_after(rt: Runtime, err: BackendError) -> None:
    if isinstance(err, UpstreamStatusError) and err.upstream_status == 429 \
            and err.retry_after_s:
        rt.breaker.hold(err.backend_id, err.retry_after_s, rt.clock())


def _blame(attempts: list[Attempt]) -> None:
    for a in attempts:
        a.blame()


def _exhausted(plan: RoutePlan, errors: list[BackendError],
               suspects: list[Attempt]) -> LLMRouteError:
    """The error for a request no attempt served. When every attempt was an HTTP 500 with an
    error body, the request itself is the likely cause: the engine's answer is returned
    (502) and no breaker is blamed; otherwise the suspects are blamed and the answer is 503."""
    if errors and len(suspects) == len(errors):
        return UpstreamStatusError(f"every backend rejected this request: {errors[0].message}",
                                   upstream_status=502, body=None,
                                   backend_id=errors[0].backend_id)
    _blame(suspects)
    detail = "; ".join(e.message for e in errors) or "no backend fits this request"
    return NoBackendAvailable(f"no backend could serve pool {plan.pool}: {detail}",
                              retry_after_s=retry_after_hint(errors))


def retry_after_hint(errors: list[BackendError]) -> float:
    """Seconds a client should wait: the largest upstream Retry-After, else 1 s."""
    hints = [getattr(e, "retry_after_s", None) for e in errors]
    return max([h for h in hints if h] or [1.0])


async def complete(rt: Runtime, request: ChatRequest, plan: RoutePlan,
                   candidates: list[Candidate]) -> tuple[Backend, dict[str, Any]]:
    """Non-streamed request with failover; returns the backend used and its answer."""
    async def call(backend: Backend) -> dict[str, Any]:
        return await rt.client.complete(backend, request.endpoint, request.body,
                                        request.request_id)

    ordered = degrade(rt, plan, candidates)
    if ordered is None:
        return canned_backend(plan.pool), canned_completion(
            request, rt.config.fuse.degradation[plan.pool], int(rt.wall_clock()))
    attempt, answer = await with_failover(rt, plan, Budget(ordered, plan.max_attempts), call,
                                          request.prompt_tokens)
    attempt.succeed(output_tokens=_completion_tokens(answer))
    rt.affinity.record(request.text, attempt.backend.id, attempt.started)
    return attempt.backend, answer


async def open_stream(rt: Runtime, request: ChatRequest, plan: RoutePlan,
                      candidates: list[Candidate]) -> tuple[Backend, AsyncIterator[bytes]]:
    """Streamed request with failover until the first chunk; returns the first backend and
    the SSE byte stream for the client (which ends with ``[DONE]`` or an OpenAI error
    event), handing off mid-stream as the fuse decides."""
    ordered = degrade(rt, plan, candidates)
    if ordered is None:
        chunks = canned_chunks(request, rt.config.fuse.degradation[plan.pool],
                               int(rt.wall_clock()))
        return canned_backend(plan.pool), _replay(chunks)
    relay = Relay(rt, request, plan, Budget(ordered, plan.max_attempts), with_failover)
    relay.prewarm()  # with fuse.prewarm the fallback prefills while the primary does
    try:
        leg = await relay.open_leg()
    except BaseException:
        relay.stop_warm()
        raise
    rt.affinity.record(request.text, leg.attempt.backend.id, leg.attempt.started)
    return leg.attempt.backend, relay.stream()


def degrade(rt: Runtime, plan: RoutePlan, candidates: list[Candidate]
            ) -> list[Candidate] | None:
    """``candidates`` under the plan pool's degradation tier (``fuse/degrade.py``); None
    for the canned answer. Raises NoBackendAvailable (503 with Retry-After) when shedding."""
    config = rt.config.fuse.degradation.get(plan.pool)
    if config is None:  # a pool without tiers is never degraded: no health to compute
        return candidates
    ids = [b.id for b in rt.backends.values() if b.pool == plan.pool]
    return tiered(candidates, plan.pool, pool_health(rt.breaker, ids, rt.clock()), config)


async def _replay(chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield encode_json(chunk)
    yield DONE


def _completion_tokens(answer: dict[str, Any]) -> int | None:
    """``usage.completion_tokens`` of a non-streamed answer, when the engine sent it."""
    usage = answer.get("usage")
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return n if isinstance(n, int) and n >= 0 else None
