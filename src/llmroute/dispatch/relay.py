"""The fused relay: one client stream across backends (legs).

A streamed answer is a chain of *legs*, one per backend. The fuse (``fuse/monitor.py``)
watches every chunk and failure of the current leg; on a handoff the leg's upstream request
is closed and the next candidate continues the text already streamed (``fuse/handoff.py``),
while the seam (``fuse/seam.py``) keeps the client's stream one unbroken answer: same chunk
``id``, no text lost or repeated, the handoffs listed in the final chunk. A tool call in
flight is never continued by another engine: a failure then ends the stream with an error
event, and an entropy trigger is ignored until the call is finished. When no backend can
continue, the stream ends with an OpenAI-shaped error event, never a fake clean stop; it
carries the failure that began the handoffs, not a fallback's own failure to continue.
A stream that keeps moving but too slowly to finish in time (``fuse/pace.py``: under
``fuse.slow.min_tokens_per_s`` over its window, or projected past its priority class's
``e2e_target_s``) is handed off like a stall (reason ``slow``), when another backend can
continue it. Every handoff and dead end is counted (``observe/metrics.py``), stored
(``observe/fuse_events.py``) and logged with the request's id. Each leg opens with pre-first-byte failover
(``failover.with_failover``) inside the request's one attempt budget; its ``Attempt`` is
settled when the leg ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import structlog

from llmroute.backends.client import Chunk, UpstreamStream
from llmroute.backends.engines import ContinuationForm, backend_capabilities
from llmroute.backends.sse import DONE, encode_json
from llmroute.dispatch.attempt import Attempt, Budget
from llmroute.dispatch.deps import Deps
from llmroute.dispatch.failover import pending_prefill, with_failover
from llmroute.errors import (
    BackendError,
    ContextLengthExceeded,
    LLMRouteError,
    NoBackendAvailable,
    UpstreamConnectError,
    UpstreamProtocolError,
    UpstreamTimeout,
    to_openai,
)
from llmroute.fuse.arming import entropy_armed
from llmroute.fuse.entropy import chunk_entropies
from llmroute.fuse.handoff import can_continue, echoed_text, leg_body
from llmroute.fuse.monitor import Fuse
from llmroute.fuse.pace import Pace, pace_for
from llmroute.fuse.retry import failure_reason, is_context_overflow
from llmroute.fuse.seam import Seam, client_top_logprobs, include_usage
from llmroute.fuse.stops import StopCutter, cut_chunk, pending_stops
from llmroute.observe.fuse_events import FuseEvent
from llmroute.types import Backend, ChatRequest, FuseVerdict, RoutePlan, StreamEvent

log = structlog.get_logger("llmroute.relay")
_WARM_DROPS = ("stream", "stream_options", "max_tokens", "max_completion_tokens", "logprobs",
               "top_logprobs")


@dataclass(slots=True)
class _Leg:
    """One backend's part of a streamed answer: its attempt, upstream request, fuse and
    pace (``fuse/pace.py``; None: nothing to watch)."""

    attempt: Attempt
    upstream: UpstreamStream
    chunks: AsyncIterator[Chunk]
    first: Chunk | None
    fuse: Fuse
    pace: Pace | None = None

    def end(self, err: BackendError | None = None, ok: bool = False,
            to_breaker: bool = True) -> None:
        """Close the upstream request and settle the attempt (``Attempt.end``: once); the
        leg's mean entropy goes to its backend's gauge and, with the attempt, into the
        trace (quality ejection reads it there)."""
        self.upstream.close()
        fuse, attempt = self.fuse, self.attempt
        if fuse.entropy_tokens and not attempt.done:
            attempt.deps.metrics.entropy.add(attempt.backend.id, fuse.entropy_sum,
                                             fuse.entropy_tokens)
        attempt.entropy = fuse.mean_entropy
        attempt.end(err, ok=ok, to_breaker=to_breaker)


class Relay:
    """The client's stream for one request across legs (see the module docstring): legs
    open on ``budget``'s candidates for ``request`` as ``plan`` allows. Stops a leg's engine
    was not sent (it takes one) are cut here (``fuse/stops.py``)."""

    _cutter: StopCutter | None = None  # set when a leg's engine takes one stop only

    def __init__(self, deps: Deps, request: ChatRequest, plan: RoutePlan, budget: Budget):
        self.deps, self.request, self.plan, self.budget = deps, request, plan, budget
        self.seam = Seam(request.endpoint, client_top_logprobs(request.endpoint, request.body),
                         include_usage=include_usage(request.body),
                         head=(f"chatcmpl-{request.request_id}", int(deps.wall_clock()),
                               request.model))
        self.leg: _Leg | None = None
        self._warm: asyncio.Task[None] | None = None
        self._warmed_at: int | None = None  # seam.tokens when the last warm-up began
        self._tail: dict[str, Any] | None = None  # a held-back terminal chunk
        self._cause: BackendError | None = None  # the failure that began the handoffs
        self._suspect = False  # the current leg's fuse saw a high-entropy run begin

    async def open_leg(self) -> _Leg:
        """Open the next backend's stream (with failover) up to its first chunk."""
        async def call(backend: Backend) -> tuple[UpstreamStream, AsyncIterator[Chunk], Chunk]:
            upstream = await self.deps.client.stream(backend, self.request.endpoint,
                                                     self._body(backend), self.request.request_id)
            chunks = aiter(upstream)
            try:
                return upstream, chunks, await _first(chunks, backend)
            except BaseException:
                upstream.close()
                raise

        attempt, (upstream, chunks, first) = await with_failover(
            self.deps, self.plan, self.budget, call,
            self.request.prompt_tokens + self.seam.tokens,
            pending_prefill(self.deps, self.request, self.seam.tokens), self.request.body)
        attempt.first_token()
        slow, req = self.deps.fuse.slow, self.request
        watch = slow.min_tokens_per_s is not None or req.finish_by is not None
        self.leg = _Leg(attempt, upstream, chunks, first, self._fuse(attempt.backend),
                        pace_for(slow, req.finish_by, req.max_tokens, self.deps.clock(),
                                 self.seam.tokens) if watch else None)
        self._suspect = False
        if self._cutter is None and isinstance(req.body.get("stop"), list):
            stops = pending_stops(req.body, self.deps.client.learned, attempt.backend)
            self._cutter = None if stops is None else StopCutter(stops)
        return self.leg

    async def stream(self) -> AsyncIterator[bytes]:
        """The client's SSE bytes; closing it (client gone) closes the upstream request."""
        try:
            while self.leg is not None:
                async for data in self._drain(self.leg):
                    yield data
            yield self._flush(last=True) + DONE
        except LLMRouteError as err:
            yield self._flush(last=True) + error_event(err)
        finally:
            self.stop_warm()
            if self.leg is not None:
                self.leg.end(None)

    def prewarm(self) -> None:
        """With ``fuse.prewarm``, keep the next candidate's prompt cache close behind the
        stream: send it the conversation plus the text so far as a continuation (one output
        token, not streamed) as the primary is asked (both prefill at once), again once
        ``fuse.prewarm_tokens`` more tokens have streamed, and after every new token while a
        high-entropy run is under way (``Fuse.suspect``: a handoff may follow) — one warm-up
        at a time. A handoff's continuation then prefills only the last few tokens. Costs
        the fallback a prefill of every streamed token, in batches. Without it, and with
        ``fuse.warm_on_suspect`` (the default), only the last part runs: the fallback starts
        prefilling at the first sign of trouble (the run's first high-entropy token) rather
        than at the trip, and follows the stream while the run lasts; that costs the
        fallback a prefill of the conversation per suspicion, none on a calm stream."""
        cfg, req = self.deps.fuse, self.request
        if not (cfg.prewarm or (self._suspect and cfg.warm_on_suspect)):  # per chunk: cheap
            return
        if req.endpoint != "chat":
            return
        busy = self._warm is not None and not self._warm.done()
        due = self._warmed_at is None or self.seam.tokens - self._warmed_at >= (
            1 if self._suspect else cfg.prewarm_tokens)
        nxt = self.budget.peek(0 if self.leg is not None else 1)
        if busy or not due or nxt is None:
            return
        self._warmed_at = self.seam.tokens
        body = leg_body(req.body, req.endpoint, backend_capabilities(nxt.backend),
                        self.seam.text, self.seam.tokens, None)
        body = {k: v for k, v in body.items() if k not in _WARM_DROPS}
        self._warm = asyncio.ensure_future(self._warm_up(nxt.backend, {
            **body, "stream": False, "max_tokens": 1}))

    def stop_warm(self) -> None:
        """Cancel a warm-up still in flight (the request is over)."""
        if self._warm is not None:
            self._warm.cancel()

    async def _warm_up(self, backend: Backend, body: dict[str, Any]) -> None:
        try:
            await self.deps.client.complete(backend, "chat", body,
                                            self.request.request_id + "-warm")
        except BackendError as err:
            log.info("prewarm_failed", backend=backend.id, error=err.message,
                     request_id=self.request.request_id)

    async def _drain(self, leg: _Leg) -> AsyncIterator[bytes]:
        """Relay ``leg`` until it ends (``self.leg`` becomes None) or hands off (``self.leg``
        becomes the next leg). Raises LLMRouteError when nothing can continue."""
        while True:
            try:
                chunk = leg.first or await anext(leg.chunks, None)
            except BackendError as err:
                await self._broken(leg, err)
                return
            leg.first = None
            if chunk is None:
                await self._ended(leg)
                return
            leg.attempt.output_tokens += 1
            if "usage" in chunk.obj:  # the engine's own count of this leg (priced pools)
                leg.attempt.usage(chunk.obj["usage"])
            if leg.fuse.armed:  # an unarmed fuse reacts to failures only
                verdict = leg.fuse.observe(StreamEvent(chunk_entropies(chunk.obj)))
                if verdict.handoff and self._can_continue():
                    await self._hand_off(leg, verdict, None)
                    return
                self._suspect = leg.fuse.suspect
            out = self.seam.rewrite(chunk.obj, self.deps.clock())
            stopped = out is not None and self._cutter is not None and cut_chunk(
                self._cutter, out, "text" if self.request.endpoint == "completions"
                else "content")
            if out is not None:
                data = self._flush(last=False)
                if Seam.terminal(out):
                    self._tail = out
                else:
                    data += encode_json(out)
                if data:
                    yield data
                self.prewarm()
            if stopped:
                last = self._stopped(leg)
                if last:
                    yield last
                return
            if leg.pace is not None and not chunk.more and self._too_slow(leg):
                await self._hand_off(leg, FuseVerdict(True, "slow", leg.fuse.window),
                                     UpstreamTimeout("the engine streamed too slowly to "
                                                     "finish in time", phase="slow",
                                                     backend_id=leg.attempt.backend.id))
                return

    def _too_slow(self, leg: _Leg) -> bool:
        """``leg``'s pace misses its floor or deadline (``fuse/pace.py``) and another
        backend can continue the answer (a slow answer beats none: with nowhere to go the
        leg streams on). Judged on the last chunk of a read only: chunks that arrived
        together (the router's own loop was late) count before any verdict."""
        assert leg.pace is not None
        return (not self.seam.finished and leg.pace.slow(self.deps.clock(), self.seam.tokens)
                and self._can_continue() and self.budget.peek() is not None
                and can_continue(self.request.body, self.request.endpoint, self.seam.text))

    def _stopped(self, leg: _Leg) -> bytes:
        """The answer reached a stop its engine was not sent: it is whole (the engine is
        stopped). When the client asked for usage, the held finish chunk goes out now and a
        usage chunk (the prompt as counted, the tokens streamed) becomes the last one."""
        self.seam.finished = True
        leg.end(None, ok=True)
        self.leg = None
        finish = self._tail
        if finish is None or not include_usage(self.request.body):
            return b""
        prompt = self.request.prompt_tokens
        self._tail = {"id": finish.get("id"), "object": finish.get("object"),
                      "created": finish.get("created"), "model": finish.get("model"),
                      "choices": [], "usage": {"prompt_tokens": prompt,
                                               "completion_tokens": self.seam.tokens,
                                               "total_tokens": prompt + self.seam.tokens}}
        return encode_json(finish)

    async def _ended(self, leg: _Leg) -> None:
        """``leg``'s body ended (``[DONE]`` or the end of the response): the answer is whole
        only once a ``finish_reason`` was seen; before that the stream was cut (a proxy that
        crashed can end a chunked body cleanly), so the fuse hands off as for a cut."""
        if self.seam.finished:
            leg.end(None, ok=True)
            self.leg = None
            return
        backend = leg.attempt.backend.id
        await self._broken(leg, UpstreamConnectError(
            "the stream ended before a finish_reason", backend_id=backend))

    async def _broken(self, leg: _Leg, err: BackendError) -> None:
        """``leg`` failed mid-stream: hand off, unless its answer was already complete (a
        ``finish_reason`` was seen), when only the ``[DONE]`` was lost."""
        if self.seam.finished:
            leg.end(None, ok=True)
            self.leg = None
            return
        verdict = leg.fuse.observe(StreamEvent(failure=failure_reason(err)))
        await self._hand_off(leg, verdict, err)

    def _flush(self, last: bool) -> bytes:
        """The held-back terminal chunk as SSE (with the ``llmroute`` field when ``last``),
        or ``b""``."""
        tail, self._tail = self._tail, None
        if tail is None:
            return b""
        if last and self.budget.trace is not None:
            self.budget.trace.streamed(tail, self.seam.text)
        return encode_json(self.seam.finish(tail) if last else tail)

    def _can_continue(self) -> bool:
        return not self.seam.tool_in_flight and not self.budget.exhausted

    async def _hand_off(self, leg: _Leg, verdict: FuseVerdict, err: BackendError | None
                        ) -> None:
        """Stop ``leg`` and open the next one; raises the failure when nothing is left. After
        a context-length refusal only a larger context may continue, and the breaker is not
        blamed."""
        old = leg.attempt.backend
        overflow = err is not None and is_context_overflow(err)
        if self._cause is None:
            self._cause = err
        leg.end(err, to_breaker=not overflow)
        if self.deps.melted is not None and leg.attempt.ttft_s is not None:
            self.deps.melted(old.id, leg.attempt.entropy)
        if overflow:
            self.budget.keep_larger_context(old.context_length)
        if not self._can_continue() or not can_continue(self.request.body,
                                                        self.request.endpoint, self.seam.text):
            await self._record(old, verdict, None)
            raise _dead_end(self._cause if err is not None and not overflow else err,
                            overflow)
        try:
            new = await self.open_leg()
        except LLMRouteError as later:
            self.leg = None
            await self._record(old, verdict, None)
            if self._cause is None:
                raise
            raise _dead_end(self._cause, overflow) from later
        self.seam.hand_off({"from": old.id, "to": new.attempt.backend.id,
                            "reason": verdict.reason},
                           self._echo(new.attempt.backend), self._restarts(new.attempt.backend))
        await self._record(old, verdict, new.attempt.backend)

    async def _record(self, backend: Backend, verdict: FuseVerdict,
                      to: Backend | None) -> None:
        kind = "handoff" if to is not None else "dead_end"
        reason = verdict.reason or "unknown"
        counter = self.deps.metrics.handoffs if to is not None else self.deps.metrics.dead_ends
        counter.labels(backend.id, reason).inc()
        log.warning("fuse_" + kind, backend=backend.id, to=to.id if to else None,
                    reason=reason, at_token=self.seam.tokens,
                    request_id=self.request.request_id)
        if self.budget.trace is not None:
            self.budget.trace.handoff(backend.id, to.id if to else None, reason,
                                      self.seam.tokens, verdict.window)
        await self.deps.fuse_events.add(FuseEvent(
            self.deps.wall_clock(), self.request.request_id, backend.id, reason, kind,
            self.seam.tokens, verdict.window, to.id if to else None))

    def _body(self, backend: Backend) -> dict[str, Any]:
        req = self.request
        top = self.deps.fuse.top_logprobs if self._armed(backend) else None
        return leg_body(req.body, req.endpoint, backend_capabilities(backend),
                        self.seam.text, self.seam.tokens, top)

    def _echo(self, backend: Backend) -> str:
        if not backend_capabilities(backend).echoes_prefix:
            return ""
        return echoed_text(self.request.body, self.request.endpoint, self.seam.text)

    def _restarts(self, backend: Backend) -> bool:
        """Whether ``backend`` continues chat by instruction (the generic form), so its
        model may start the answer over instead of continuing it (``fuse/overlap.py``)."""
        return self.request.endpoint == "chat" and \
            backend_capabilities(backend).continuation is ContinuationForm.GENERIC

    def _armed(self, backend: Backend) -> bool:
        """Whether the entropy trigger runs on ``backend`` (so logprobs are requested)."""
        return entropy_armed(self.deps.fuse, backend, self.request.endpoint,
                             self.request.has_tools)

    def _fuse(self, backend: Backend) -> Fuse:
        armed = self._armed(backend)
        return Fuse(self.deps.fuse.for_pool(backend.pool) if armed else None)


async def _first(chunks: AsyncIterator[Chunk], backend: Backend) -> Chunk:
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        raise UpstreamProtocolError("the engine's stream ended before any chunk",
                                    backend_id=backend.id) from None


def _dead_end(err: BackendError | None, overflow: bool) -> LLMRouteError:
    """The error that ends a stream nothing can continue."""
    if err is None:
        return NoBackendAvailable("no backend can continue this answer")
    if overflow:
        return ContextLengthExceeded(f"no backend has the context this answer needs: "
                                     f"{err.message}")
    return err


def error_event(err: LLMRouteError) -> bytes:
    """An in-stream OpenAI-shaped error event."""
    return encode_json(to_openai(err)[1])
