"""Per-request traces: a small mutable ``Recorder`` made when a request arrives and passed
down as an argument (exchange → pipeline → dispatch), finished into an immutable ``Trace``.

A trace is the request's steps in order, each with its start offset and duration (ms from
the request's arrival) and what it decided: ``receive`` (authenticate, read and parse the
body), ``policy`` (key id, tenant; the admission), ``gate`` (intent, confidence,
runners-up, complexity, the stage that answered), ``strategy`` (id@version, kind, pool),
``anchor`` (the candidates in order with their total and per-scorer scores — what the
request path computed: it ranks with ``explain=False``, so a lone survivor has no scores
and a fallback reached only by filtering has score 0), one ``attempt`` per backend tried
(status, TTFT, output tokens, error), each ``handoff`` or ``dead_end`` (from, to, reason,
token, entropy window) and the ``response`` (status, usage, finish reason).

W3C trace context: the request is one span (``span_id``, 16 hex digits, new per request)
in the trace ``w3c_trace_id`` (the incoming ``traceparent``'s, else the request id when it
is 32 hex digits, as generated ids are, else a digest of it); each engine call carries a
``traceparent`` naming its own new span id, whose parent is the request span
(``TraceContext``), and the attempt step that call settles keeps that ``span_id``.

Costs: a few list appends and ``perf_counter`` calls per request, one span id per
request and per engine call (``random.getrandbits``, no system call); nothing per chunk.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import time
from contextvars import ContextVar
from operator import attrgetter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from llmroute.errors import LLMRouteError
from llmroute.types import Candidate, Intent

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16

Fields = dict[str, Any]
_ROUND = float.__round__
"""``round`` for a float, without the builtin's method lookup (~500 instructions less a
call; a step's times are floats: ``Recorder`` computes them, ``Trace.from_json`` converts)."""


def round_us(ms: float) -> float:
    """``ms`` (finite) rounded to 3 decimals, to the µs: ``round(ms * 1000) / 1000``, the
    same value as ``round(ms, 3)`` but for ties of the binary value, at 1.0 k instructions
    where ``round(ms, 3)`` takes 2.6 k (it formats the float as decimal text and parses it
    back; callgrind, CPython 3.11). Raises ValueError for NaN, OverflowError for ±inf
    (the times are differences of clock readings)."""
    return _ROUND(ms * 1000.0) / 1000.0


def round4(x: float) -> float:
    """``round(x, 4)``; an integral float (the gate-off verdict's confidence 0.0, a score
    of 0 or 1) is returned as it is, which is what ``round`` gives for it, at ~0.1 k
    instructions where ``round(x, 4)`` takes 2.6 k (``round_us``)."""
    return x if type(x) is float and x.is_integer() else round(x, 4)


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace-id of a W3C ``traceparent`` header (``00-<32 hex>-<16 hex>-<2 hex>``), or
    None when it is absent or malformed (or all zeros, which the spec forbids)."""
    if not traceparent:
        return None
    m = _TRACEPARENT.match(traceparent.strip().lower())
    return m.group(1) if m and m.group(1) != _ZERO_TRACE else None


def parent_span_of(traceparent: str | None) -> str | None:
    """The parent-id (16 hex digits) of a valid W3C ``traceparent``, else None."""
    m = _TRACEPARENT.match(traceparent.strip().lower()) if traceparent else None
    if m is None or m.group(1) == _ZERO_TRACE or m.group(2) == _ZERO_SPAN:
        return None
    return m.group(2)


def w3c_trace_id(trace_id: str) -> str:
    """``trace_id`` when it is a valid W3C trace id (32 lowercase hex digits, not all
    zeros), else the first 32 hex digits of its BLAKE2b digest (a client's own request id:
    the same id always maps to the same trace)."""
    if _HEX32.match(trace_id) and trace_id != _ZERO_TRACE:
        return trace_id
    return hashlib.blake2b(trace_id.encode(), digest_size=16).hexdigest()


def new_span_id() -> str:
    """A new random span id: 16 hex digits, never all zeros (W3C forbids that id). Drawn
    with ``random.getrandbits``, as OpenTelemetry's SDK draws its ids: a span id must be
    unique, not secret, and ``os.urandom`` would cost a system call per id."""
    bits = random.getrandbits(64)
    while not bits:
        bits = random.getrandbits(64)
    return bits.to_bytes(8, "big").hex()


class Step(NamedTuple):
    """One step: ``name``, ``start_ms`` (offset from the request's arrival), ``duration_ms``
    and what it decided (``fields``, JSON-ready). A NamedTuple: made several times per
    request, at half a frozen dataclass's cost."""

    name: str
    start_ms: float
    duration_ms: float
    fields: Fields

    def to_json(self) -> Fields:
        """``{"step", "start_ms", "duration_ms", **fields}`` (the times rounded to µs)."""
        return {"step": self.name, "start_ms": round_us(self.start_ms),
                "duration_ms": round_us(self.duration_ms), **self.fields}


class Trace(NamedTuple):
    """A finished request: ids, ``at`` (epoch s of its arrival), the summary fields the log
    line, metrics and audit read, and its ``steps`` in order (a NamedTuple, as ``Step``)."""

    request_id: str
    trace_id: str
    at: float
    duration_ms: float
    status: int
    summary: Fields
    steps: tuple[Step, ...]
    span_id: str = ""
    parent_span_id: str | None = None

    def to_json(self) -> Fields:
        """The JSON answer of ``GET /trace/{request_id}``."""
        return {"request_id": self.request_id, "trace_id": self.trace_id, "at": self.at,
                "duration_ms": round_us(self.duration_ms), "status": self.status,
                "span_id": self.span_id, "parent_span_id": self.parent_span_id,
                **self.summary, "steps": [s.to_json() for s in self.steps]}

    @classmethod
    def from_json(cls, obj: Fields) -> Trace:
        """The trace ``to_json`` wrote (a stored trace). Raises KeyError or TypeError when
        ``obj`` is not such a JSON object."""
        obj = dict(obj)
        head = [obj.pop(k) for k in ("request_id", "trace_id", "at", "duration_ms", "status")]
        span, parent = obj.pop("span_id", ""), obj.pop("parent_span_id", None)
        steps = tuple(Step(s.pop("step"), float(s.pop("start_ms")),
                           float(s.pop("duration_ms")), s) for s in map(dict, obj.pop("steps")))
        return cls(*head, summary=obj, steps=steps, span_id=span, parent_span_id=parent)


@dataclass(slots=True)
class Recorder:
    """The trace being recorded for one request (times: ``time.perf_counter`` s).

    ``summary`` collects the decision fields (tenant, key_id, intent, strategy, pool, backend,
    ttft_ms, tokens_in/out, handoffs, finish_reason); ``prompt``/``answer`` (the texts) are
    logged only when prompts are logged; the audit keeps their SHA-256 digests only."""

    request_id: str
    trace_id: str
    at: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.perf_counter)
    last: float = 0.0
    stream: bool = False
    status: int = 200
    steps: list[Step] = field(default_factory=list)
    summary: Fields = field(default_factory=dict)
    prompt: str | None = None
    answer: str | None = None
    span_id: str = field(default_factory=new_span_id)
    parent_span_id: str | None = None
    calls: dict[str, list[str]] = field(default_factory=dict)

    def traceparent(self, backend_id: str) -> str:
        """The ``traceparent`` header of a new engine call on ``backend_id``: this trace,
        a new span id (kept for the attempt step it settles; the newest call on a backend
        settles first), sampled."""
        span = new_span_id()
        self.calls.setdefault(backend_id, []).append(span)
        return f"00-{w3c_trace_id(self.trace_id)}-{span}-01"

    def step(self, name: str, **fields: Any) -> float:
        """Record step ``name`` from the end of the previous one (the arrival, for the
        first) until now; returns its duration in ms."""
        now = time.perf_counter()
        start = self.last or self.t0
        self.last = now
        self.steps.append(Step(name, (start - self.t0) * 1000, (now - start) * 1000, fields))
        return (now - start) * 1000

    def received(self, stream: bool, prompt_tokens: int, prompt: str,
                 max_tokens: int | None = None) -> None:
        """The request was read and parsed (a ``receive`` step: auth, body, parsing), with
        the client's ``max_tokens`` when it gave one (what a truncated answer is measured
        against)."""
        self.stream, self.prompt = stream, prompt
        self.summary["tokens_in"] = prompt_tokens
        if max_tokens is None:
            self.step("receive", stream=stream, prompt_tokens=prompt_tokens)
        else:
            self.step("receive", stream=stream, prompt_tokens=prompt_tokens,
                      max_tokens=max_tokens)

    def caller(self, key_id: str, tenant: str) -> None:
        """The authenticated caller (a ``policy`` step, timing the admission)."""
        self.summary["tenant"], self.summary["key_id"] = tenant, key_id
        self.step("policy", key_id=key_id, tenant=tenant)

    def gate(self, intent: Intent) -> float:
        """The gate's verdict (with the win head's ``wins``: ``[[pool, probability, rank],
        …]`` when it answered); returns the gate's time in ms."""
        self.summary["intent"] = intent.label
        extra = {"wins": [list(w) for w in intent.wins]} if intent.wins else {}
        return self.step("gate", intent=intent.label, confidence=round4(intent.confidence),
                         runners_up=[[k, round4(v)] for k, v in intent.runners_up],
                         complexity=intent.complexity, source=intent.source, **extra)

    def strategy(self, header: str, kind: str, pool: str) -> None:
        """The matched strategy (``<id>@<version>``), its kind and the plan's pool."""
        self.summary["strategy"], self.summary["pool"] = header, pool
        self.step("strategy", strategy=header, kind=kind, pool=pool)

    def cache(self, result: str, reason: str, similarity: float = 0.0,
              served_from: str | None = None) -> None:
        """The answer cache's lookup (a ``cache`` step): ``result`` (``hit-exact``,
        ``hit-semantic``, ``miss``, ``bypass``), its ``reason``, the cosine ``similarity``
        of a semantic hit, and for a hit the request whose answer it serves
        (``served_from``: the summary's ``cache_from``, which the log line and the audit
        record carry)."""
        self.summary["cache"] = result
        fields: dict[str, Any] = {"result": result, "reason": reason}
        if served_from is not None:
            self.summary["cache_from"] = fields["served_from"] = served_from
            fields["similarity"] = round(similarity, 4)
        self.step("cache", **fields)

    def anchor(self, candidates: list[Candidate]) -> None:
        """The ranked candidates, first = chosen (scores as the request path computed them:
        NaN for an unscored lone survivor becomes null)."""
        self.step("anchor", candidates=[
            {"backend": c.backend.id, "score": _num(c.score),
             "scores": {k: round4(v) for k, v in c.scores.items()}} for c in candidates])

    def attempt(self, backend: str, duration_s: float, ttft_s: float | None, tokens: int,
                err: BaseException | None, *, ok: bool, model: str | None = None,
                entropy: float | None = None, cost: tuple[str, int, float] | None = None
                ) -> None:
        """One settled attempt on ``backend`` (serving ``model``) that took ``duration_s``
        (ending now): ``ok``, or failed with ``err`` (None and not ok: abandoned — handed
        off or client gone); it keeps the span id of the newest engine call on
        ``backend`` (None when the call carried none); ``entropy``, the streamed leg's
        mean token entropy in nats, is noted when the fuse measured one. ``cost``:
        ``(pool, prompt tokens, cost)`` when its pool is priced — the step gains
        ``prompt_tokens`` and ``cost``, and the summary's ``cost`` (the request's total,
        currency units) and ``cost_by_pool`` add it up."""
        start = time.perf_counter() - duration_s
        ttft = None if ttft_s is None else round_us(ttft_s * 1000)
        if ok:
            self.summary["backend"] = backend
        if ttft is not None and "ttft_ms" not in self.summary:
            self.summary["ttft_ms"] = round_us((start - self.t0) * 1000 + ttft)
        self.summary["tokens_out"] = self.summary.get("tokens_out", 0) + tokens
        calls = self.calls.get(backend)
        fields = {
            "backend": backend, "ok": ok, "model": model,
            "span_id": calls.pop() if calls else None,
            "status": 200 if ok else getattr(err, "upstream_status", None),
            "ttft_ms": ttft, "tokens": tokens,
            "error": getattr(err, "message", None) if err is not None else None,
            "detail": getattr(err, "detail", None),
            **({} if entropy is None else {"entropy": round(entropy, 4)})}
        if cost is not None:
            fields["prompt_tokens"], fields["cost"] = cost[1], cost[2]
            self.spent(cost[0], cost[2])
        self.steps.append(Step("attempt", (start - self.t0) * 1000, duration_s * 1000, fields))

    def spent(self, pool: str, cost: float) -> None:
        """Add ``cost`` (currency units) spent on ``pool`` to the summary's ``cost`` and
        ``cost_by_pool``."""
        summary = self.summary
        summary["cost"] = summary.get("cost", 0.0) + cost
        by_pool = summary.setdefault("cost_by_pool", {})
        by_pool[pool] = by_pool.get(pool, 0.0) + cost

    def handoff(self, backend: str, to: str | None, reason: str, at_token: int,
                window: tuple[float, ...]) -> None:
        """A handoff from ``backend`` to ``to`` (None: a dead end, nothing continued), noted
        once the next leg has opened: the step runs from the end of ``backend``'s attempt
        until now (its duration is the gap the client saw)."""
        kind = "handoff" if to is not None else "dead_end"
        if to is not None:
            self.summary.setdefault("handoffs", []).append([backend, reason])
        now = (time.perf_counter() - self.t0) * 1000
        ended = next((s.start_ms + s.duration_ms for s in reversed(self.steps)
                      if s.name == "attempt" and s.fields["backend"] == backend), now)
        self.steps.append(Step(kind, ended, now - ended, {
            "backend": backend, "to": to, "reason": reason, "at_token": at_token,
            "window": [round(h, 4) for h in window]}))

    def quality(self, note: Fields) -> None:
        """A ``quality`` step after the anchor: which of the plan's backends quality
        ejection has demoted (``{backend: state}``) and whether the chosen one is a probe
        (``observe/quality.py``: ``quality_note``)."""
        self.step("quality", **note)

    def answered(self, body: Any) -> None:
        """A JSON answer: its ``usage``, first choice's ``finish_reason`` and (unless a
        stream already set it) that choice's text as ``answer``."""
        if not isinstance(body, dict):
            return
        usage, choices = body.get("usage"), body.get("choices")
        if isinstance(usage, dict):
            self.summary["usage"] = usage
            if isinstance(usage.get("completion_tokens"), int):
                self.summary["tokens_out"] = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                self.summary["tokens_in"] = usage["prompt_tokens"]
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            self.finish_reason(choices[0].get("finish_reason"))
            message = choices[0].get("message")
            if self.answer is None and isinstance(message, dict) \
                    and isinstance(message.get("content"), str):
                self.answer = message["content"]

    def finish_reason(self, reason: Any) -> None:
        """The answer's finish reason (a stream's comes from its terminal chunk)."""
        self.summary["finish_reason"] = reason

    def streamed(self, terminal: dict[str, Any], text: str) -> None:
        """A stream's terminal chunk (its finish reason, and usage when it has it) and the
        answer ``text`` (kept for the log line only)."""
        self.answer = text
        self.answered(terminal)

    def filtered(self, text: str) -> None:
        """The streamed answer ``text`` as the output filter let it out (replaces the
        relay's unfiltered text)."""
        self.answer = text

    def fail(self, status: int, error: str) -> None:
        """The request ended in an error answer with HTTP ``status``."""
        self.status = status
        self.summary["error"] = error

    def finish(self) -> Trace:
        """The immutable trace, its steps in order of their start, with a closing
        ``response`` step."""
        now = time.perf_counter()
        start = max([s.start_ms + s.duration_ms for s in self.steps], default=0.0)  # no generator
        total = (now - self.t0) * 1000
        self.steps.append(Step("response", start, max(total - start, 0.0), {
            "status": self.status, "usage": self.summary.get("usage"),
            "finish_reason": self.summary.get("finish_reason")}))
        return Trace(self.request_id, self.trace_id, self.at, total, self.status,
                     self.summary, tuple(sorted(self.steps, key=_START)), self.span_id,
                     self.parent_span_id)


class TraceContext:
    """The request being served, for the engine client's ``traceparent`` header: set by
    the Observer as a request arrives (a ``ContextVar``: each request's task, and the
    tasks it starts, see their own), read once per engine call."""

    def __init__(self) -> None:
        self._current: ContextVar[Recorder | None] = ContextVar("llmroute_trace", default=None)

    def enter(self, rec: Recorder) -> None:
        """``rec`` is the request the current task serves from now on."""
        self._current.set(rec)

    def traceparent(self, backend_id: str) -> str | None:
        """The ``traceparent`` for a new engine call on ``backend_id`` from the current
        request (None outside one)."""
        rec = self._current.get()
        return None if rec is None else rec.traceparent(backend_id)


def failure(exc: BaseException) -> tuple[int, str]:
    """``(HTTP status, message)`` of the error a request ended with (499: the client left)."""
    if isinstance(exc, LLMRouteError):
        return exc.status, exc.message
    if isinstance(exc, asyncio.CancelledError) or type(exc).__name__ == "ClientDisconnect":
        return 499, "client disconnected"
    return 500, "internal error"


_START = attrgetter("start_ms")
"""A step's start (ms): the order of a finished trace's steps (a C-level key: no Python call
per step)."""


def _num(x: float) -> float | None:
    return None if x != x else round4(x)  # NaN → null (JSON has no NaN)
