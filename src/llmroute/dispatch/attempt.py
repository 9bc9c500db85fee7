"""One attempt's accounting, from ``begin`` to its one end, and the request's attempt budget.

An ``Attempt`` is one request on one backend: ``begin`` counts it in flight there (a
half-open breaker's probe) with its prompt pending prefill; ``first_token`` ends the
prefill and notes the TTFT; exactly one of ``succeed`` / ``fail`` settles it in the
router-side stats and the breaker (``end`` picks the right one; a second settlement does
nothing). ``Budget`` is the request's one attempt budget, shared by pre-first-byte retries
and mid-stream handoffs.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmroute.anchor.stats.router import PrefillTicket
from llmroute.dispatch.deps import Deps
from llmroute.errors import BackendError
from llmroute.observe.trace import Recorder
from llmroute.types import Backend, Candidate, Outcome


@dataclass(slots=True)
class Attempt:
    """Accounting for one request on one backend: in-flight, latency, TTFT, breaker.

    ``started`` and ``ttft_s`` are ``deps.clock`` seconds; ``output_tokens`` counts the
    streamed chunks; ``entropy`` is the leg's mean token entropy (nats) when the fuse
    measured it (the relay sets it), noted in the trace; ``prompt_tokens`` is the prompt
    sent (the request's count or estimate, plus the text already streamed for a
    continuation; an engine's reported usage replaces it: ``usage``); ``done`` is True once
    settled."""

    deps: Deps
    backend: Backend
    started: float
    ticket: PrefillTicket | None = None
    ttft_s: float | None = None
    output_tokens: int = 0
    done: bool = False
    trace: Recorder | None = None
    entropy: float | None = None
    prompt_tokens: int = 0
    reported: int | None = None

    @classmethod
    def begin(cls, deps: Deps, backend: Backend, prompt_tokens: int = 0,
              trace: Recorder | None = None) -> Attempt:
        """Count a request as in flight on ``backend`` (a half-open breaker's probe), its
        ``prompt_tokens`` as pending prefill there until its first token; its settlement
        is noted in ``trace``."""
        now = deps.clock()
        deps.breaker.begin(backend.id, now)
        return cls(deps, backend, now, deps.stats.sent(backend.id, prompt_tokens, now),
                   trace=trace, prompt_tokens=prompt_tokens)

    def usage(self, usage: object) -> None:
        """Adopt an engine's reported ``usage`` (an OpenAI usage object; anything else is
        ignored): its ``prompt_tokens`` replace the estimate, its ``completion_tokens`` are
        kept for ``succeed`` (a stream's chunk count stays the fallback)."""
        if not isinstance(usage, dict):
            return
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if type(prompt) is int and prompt >= 0:
            self.prompt_tokens = prompt
        if type(completion) is int and completion >= 0:
            self.reported = completion

    def first_token(self) -> None:
        """The first token arrived: the prompt is no longer pending, and the time since
        ``begin`` (the TTFT, ``ttft_s``) teaches the backend's TTFT model."""
        now = self.deps.clock()
        self.ttft_s = now - self.started
        if self.ticket is not None:
            self.deps.stats.prefill_ended(self.ticket, now, first_token=True)
            self.ticket = None

    def end(self, err: BackendError | None = None, *, ok: bool = False,
            to_breaker: bool = True) -> None:
        """Settle the attempt unless it is settled already: ``ok`` → ``succeed``, else
        ``fail`` with ``err`` (None: abandoned; ``to_breaker`` as ``fail`` takes it)."""
        if ok:
            self.succeed()
        else:
            self.fail(err, to_breaker=to_breaker)

    def succeed(self, output_tokens: int | None = None) -> None:
        """The request completed; records end-to-end latency (and the TTFT when a first
        token was seen) and the output tokens (``output_tokens``, else the engine's
        reported completion tokens, else the streamed chunks counted in the field). Does
        nothing once settled."""
        if self._settle():
            return
        now = self.deps.clock()
        ttft_ms = None if self.ttft_s is None else self.ttft_s * 1000
        out = output_tokens or self.reported or self.output_tokens
        self.deps.stats.finished(self.backend.id, now, ok=True,
                                 latency_ms=(now - self.started) * 1000, ttft_ms=ttft_ms,
                                 output_tokens=out or None, ticket=self._take_ticket())
        self.deps.breaker.record(self.backend.id, Outcome.SUCCESS, now)
        if self.trace is not None:
            self.trace.attempt(self.backend.id, now - self.started, self.ttft_s, out, None,
                               ok=True, model=self.backend.model, entropy=self.entropy,
                               cost=self._cost(out))

    def fail(self, err: BaseException | None, *, to_breaker: bool = True) -> None:
        """The request failed (``err``) or was abandoned (None: client gone, or handed off
        by the entropy trigger). A retryable failure counts against the breaker unless
        ``to_breaker`` is False (see ``failover.blame_later``). Does nothing once settled."""
        if self._settle():
            return
        now = self.deps.clock()
        self.deps.stats.finished(self.backend.id, now, ok=err is None,
                                 ticket=self._take_ticket())
        if self.trace is not None:
            out = self.reported or self.output_tokens
            self.trace.attempt(self.backend.id, now - self.started, self.ttft_s, out, err,
                               ok=False, model=self.backend.model, entropy=self.entropy,
                               cost=self._cost(out) if self.ttft_s is not None else None)
        if to_breaker and isinstance(err, BackendError) and err.retryable:
            self.blame()
        else:
            self.deps.breaker.release(self.backend.id)

    def blame(self) -> None:
        """Count one failure against this backend's circuit breaker."""
        self.deps.breaker.record(self.backend.id, Outcome.FAILURE, self.deps.clock())

    def _cost(self, completion_tokens: int) -> tuple[str, int, float] | None:
        """``(pool, prompt tokens, cost)`` of this attempt at its pool's price (None: the
        pool is not priced): what a leg that answered, or streamed before it was handed off
        or failed, used. A failure before the first token costs nothing."""
        price = self.backend.price
        if price is None:
            return None
        return (self.backend.pool, self.prompt_tokens,
                price.cost(self.prompt_tokens, completion_tokens))

    def _settle(self) -> bool:
        """Mark the attempt settled; True when it already was."""
        was, self.done = self.done, True
        return was

    def _take_ticket(self) -> PrefillTicket | None:
        """The pending-prefill ticket, handed to ``finished`` (which ends it) only once."""
        ticket, self.ticket = self.ticket, None
        return ticket


class Budget:
    """The request's one attempt budget: at most ``max_attempts`` attempts (``RoutePlan``)
    shared by pre-first-byte retries and mid-stream handoffs, over ``candidates`` in order,
    each backend at most once; ``queue`` holds those not tried yet (``serve.send`` narrows
    or reorders it first: the pool's degradation tier, the ``n`` capability);
    ``adapted``: the one reshaped retry after an engine's refusal was spent
    (``dispatch/adapt.py``)."""

    adapted = False  # set on the instance when spent: nothing to do per request before

    def __init__(self, candidates: list[Candidate], max_attempts: int,
                 trace: Recorder | None = None):
        self.queue = list(candidates)
        self.left = max_attempts
        self.trace = trace  # the request's trace: its attempts and handoffs

    def take(self) -> Candidate | None:
        """The next candidate, spending one attempt; None when the budget is spent."""
        if self.left <= 0 or not self.queue:
            return None
        self.left -= 1
        return self.queue.pop(0)

    def peek(self, skip: int = 0) -> Candidate | None:
        """The candidate after the next ``skip`` ones, without spending an attempt; None
        when the budget cannot reach it."""
        if self.left <= skip or len(self.queue) <= skip:
            return None
        return self.queue[skip]

    def put_back(self, candidate: Candidate) -> None:
        """Give back the attempt spent on ``candidate`` and make it the next one (a request
        sent again, reshaped, after its engine refused the shape: ``dispatch/adapt.py``)."""
        self.queue.insert(0, candidate)
        self.left += 1

    @property
    def request_id(self) -> str | None:
        """The request's id, for log lines (its trace's; None without a trace)."""
        return None if self.trace is None else self.trace.request_id

    @property
    def exhausted(self) -> bool:
        """True when no further attempt is possible."""
        return self.left <= 0 or not self.queue

    def keep_larger_context(self, context_length: int) -> bool:
        """Drop candidates whose context (tokens) is not above ``context_length``; True when
        some candidate is left."""
        self.queue = [c for c in self.queue if c.backend.context_length > context_length]
        return bool(self.queue)
