"""Dispatch: send a request to the anchor's candidates in order, failing over before the
first byte (connect errors, timeouts, 429, 5xx) within the plan's attempt budget, and relay
streams with accounting. The pure decisions live in ``fuse/`` (retry, breaker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import structlog

from llmroute.backends.client import Chunk, UpstreamStream
from llmroute.backends.sse import DONE
from llmroute.errors import (
    BackendError,
    LLMRouteError,
    NoBackendAvailable,
    UpstreamProtocolError,
    UpstreamStatusError,
    to_openai,
)
from llmroute.fuse.retry import backoff_s
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

    @classmethod
    def begin(cls, rt: Runtime, backend: Backend) -> Attempt:
        """Count a request as in flight on ``backend``."""
        now = rt.clock()
        rt.stats.started(backend.id, now)
        return cls(rt, backend, now)

    def succeed(self, ttft_s: float | None = None) -> None:
        """The request completed; records end-to-end latency (and TTFT for streams)."""
        now = self.rt.clock()
        ttft_ms = None if ttft_s is None else ttft_s * 1000
        self.rt.stats.finished(self.backend.id, now, ok=True,
                               latency_ms=(now - self.started) * 1000, ttft_ms=ttft_ms)
        self.rt.breaker.record(self.backend.id, Outcome.SUCCESS, now)

    def fail(self, err: BaseException | None, *, to_breaker: bool = True) -> None:
        """The request failed (``err``) or was abandoned by the client (None). A retryable
        failure counts against the breaker unless ``to_breaker`` is False (see
        ``blame_later``)."""
        now = self.rt.clock()
        self.rt.stats.finished(self.backend.id, now, ok=err is None)
        if to_breaker and isinstance(err, BackendError) and err.retryable:
            self.blame()

    def blame(self) -> None:
        """Count one failure against this backend's circuit breaker."""
        self.rt.breaker.record(self.backend.id, Outcome.FAILURE, self.rt.clock())


def blame_later(err: BackendError) -> bool:
    """An HTTP 500 with a JSON error body means the engine ran and rejected *this request*
    (llama.cpp answers 500 to a malformed ``tools`` list, for example). Such a failure counts
    against the breaker only once another backend has shown the request was servable, so
    one client's bad requests cannot open every breaker."""
    return isinstance(err, UpstreamStatusError) and err.upstream_status == 500 \
        and err.body is not None


async def with_failover(rt: Runtime, plan: RoutePlan, candidates: list[Candidate],
                        call: Callable[[Backend], Awaitable[T]]) -> tuple[Attempt, T]:
    """``call`` candidates in order until one succeeds; at most ``plan.max_attempts``.

    Raises the first non-retryable BackendError as is (a 4xx from the engine), or
    NoBackendAvailable when every attempt failed or there is no candidate.
    """
    errors: list[BackendError] = []
    suspects: list[Attempt] = []
    for n, cand in enumerate(candidates[:plan.max_attempts]):
        if n:
            await asyncio.sleep(backoff_s(rt.config.retry, n, rt.rng, errors[-1]))
        attempt = Attempt.begin(rt, cand.backend)
        try:
            result = await call(cand.backend)
        except BackendError as err:
            later = blame_later(err)
            attempt.fail(err, to_breaker=not later)
            log.warning("attempt_failed", backend=cand.backend.id, error=err.message)
            if not err.retryable:
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

    attempt, answer = await with_failover(rt, plan, candidates, call)
    attempt.succeed()
    return attempt.backend, answer


async def open_stream(rt: Runtime, request: ChatRequest, plan: RoutePlan,
                      candidates: list[Candidate]) -> tuple[Backend, AsyncIterator[bytes]]:
    """Streamed request with failover until the first chunk; returns the backend and the
    SSE byte stream for the client (which ends with ``[DONE]`` or an OpenAI error event)."""
    async def call(backend: Backend) -> tuple[UpstreamStream, AsyncIterator[Chunk], Chunk]:
        upstream = await rt.client.stream(backend, request.endpoint, request.body,
                                          request.request_id)
        chunks = aiter(upstream)
        try:
            return upstream, chunks, await _first(chunks, backend)
        except BaseException:
            upstream.close()
            raise

    attempt, (upstream, chunks, first) = await with_failover(rt, plan, candidates, call)
    ttft_s = rt.clock() - attempt.started
    return attempt.backend, relay(attempt, upstream, chunks, first, ttft_s)


async def _first(chunks: AsyncIterator[Chunk], backend: Backend) -> Chunk:
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        raise UpstreamProtocolError(f"{backend.id}: stream ended before any chunk",
                                    backend_id=backend.id) from None


async def relay(attempt: Attempt, upstream: UpstreamStream, chunks: AsyncIterator[Chunk],
                first: Chunk, ttft_s: float) -> AsyncIterator[bytes]:
    """Yield ``first`` and every later chunk as SSE; after the first byte an upstream
    failure ends the stream with an OpenAI-shaped error event (never a fake clean stop).
    Closing this iterator (client gone) closes the upstream request."""
    outcome: BaseException | None = None
    try:
        yield _sse(first)
        async for chunk in chunks:
            yield _sse(chunk)
        yield DONE
    except BackendError as err:
        outcome = err
        yield error_event(err)
    except BaseException as exc:
        outcome = exc
        raise
    finally:
        upstream.close()
        _settle(attempt, outcome, ttft_s)


def _settle(attempt: Attempt, outcome: BaseException | None, ttft_s: float) -> None:
    if outcome is None:
        attempt.succeed(ttft_s)
    else:
        attempt.fail(outcome if isinstance(outcome, BackendError) else None)


def _sse(chunk: Chunk) -> bytes:
    return b"data: " + chunk.data.encode() + b"\n\n"


def error_event(err: BackendError | NoBackendAvailable) -> bytes:
    """An in-stream OpenAI-shaped error event."""
    return b"data: " + orjson.dumps(to_openai(err)[1]) + b"\n\n"
