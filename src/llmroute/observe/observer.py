"""The Observer: where a request's trace ends up. ``recorder`` starts one (the exchange
calls it as a request arrives); ``finish`` turns it into an immutable ``Trace`` and hands
that to the trace ring (``GET /trace/{id}``), the metrics, the per-request log line, the
decision audit, the trace store and the OTLP export. Everything here is in memory and
cheap; disk writes happen in the writers' own tasks (``audit.py``, ``trace_store.py``) and
OTLP posts in the exporter's thread (``otlp.py``).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from llmroute.config.observe import ObserveConfig
from llmroute.observe.audit import AuditLog
from llmroute.observe.logging import direct_lines
from llmroute.observe.metrics import Metrics
from llmroute.observe.trace import (Recorder, Trace, TraceContext, parent_span_of, round_us,
                                    trace_id_of)
from llmroute.observe.trace_store import TraceStore

if TYPE_CHECKING:  # the OpenTelemetry SDK is imported only when an export is configured
    from llmroute.observe.otlp import OtlpExport

log = structlog.get_logger("llmroute.request")
SUMMARY_KEYS = ("tenant", "key_id", "intent", "strategy", "pool", "backend", "cache",
                "cache_from")
DECISION_STEPS = frozenset(("gate", "strategy", "anchor"))


class TraceRing:
    """The newest ``size`` traces by request id (a repeated id keeps the newest)."""

    def __init__(self, size: int):
        self._size = size
        self._traces: OrderedDict[str, Trace] = OrderedDict()

    def put(self, trace: Trace) -> None:
        """Keep ``trace``, forgetting the oldest beyond ``size``."""
        if self._size <= 0:
            return
        traces = self._traces
        traces.pop(trace.request_id, None)  # a repeated id moves to the newest end
        traces[trace.request_id] = trace
        if len(traces) > self._size:
            traces.popitem(last=False)

    def get(self, request_id: str) -> Trace | None:
        """The trace of ``request_id``, or None when unknown or already forgotten."""
        return self._traces.get(request_id)

    def recent(self, limit: int) -> list[Trace]:
        """The newest ``limit`` traces, newest first."""
        return list(itertools.islice(reversed(self._traces.values()), max(limit, 0)))


class Observer:
    """Traces, metrics, the log line, the audit, the trace store and the OTLP export for
    every request (``config``); ``audit``, ``store`` and ``otlp`` are None when off;
    ``context`` hands the current request to the engine client (``traceparent``).
    ``instance`` names this router process (``host:pid``) and ``config_sha256`` the config
    it serves (set by the composition root, again on reload); both go into every audit
    record. ``on_finish`` hooks (set by the composition root: quality ejection's
    ``Healing.observe``) are called with each finished trace and its recorder."""

    def __init__(self, config: ObserveConfig, metrics: Metrics, audit: AuditLog | None,
                 context: TraceContext | None = None, store: TraceStore | None = None,
                 otlp: OtlpExport | None = None):
        self.config, self.metrics, self.audit = config, metrics, audit
        self.context, self.store, self.otlp = context or TraceContext(), store, otlp
        self.ring = TraceRing(config.trace_ring)
        self.instance = f"{socket.gethostname()}:{os.getpid()}"
        self.config_sha256: str | None = None
        self.on_finish: list[Callable[[Trace, Recorder], None]] = []
        self._series: dict[tuple[str, ...], Any] = {}  # labelled children, looked up once
        self._children: dict[tuple[Any, ...], Any] = {}  # (metric, *labels) → its child

    def recorder(self, request_id: str, headers: Mapping[str, str]) -> Recorder:
        """A recorder for a request arriving now, made the current one for its engine
        calls; the trace id is the W3C ``traceparent``'s when the request carries one (its
        parent-id the request span's parent), else the request id."""
        tp = headers.get("traceparent")
        rec = Recorder(request_id, trace_id_of(tp) or request_id)
        if tp is not None:
            rec.parent_span_id = parent_span_of(tp)
        self.context.enter(rec)
        return rec

    def finish(self, rec: Recorder) -> Trace:
        """Close ``rec``'s trace and record it everywhere; returns it."""
        trace = rec.finish()
        self.ring.put(trace)
        self._measure(trace, rec.stream)
        if self.config.log_requests:
            self._log(trace, rec)
        if self.audit is not None:
            self.audit.add(trace, rec.prompt, rec.answer, self.instance, self.config_sha256)
        if self.store is not None:
            self.store.put(trace)
        if self.otlp is not None:
            self.otlp.export(trace)
        for hook in self.on_finish:
            hook(trace, rec)
        return trace

    async def find(self, request_id: str) -> Trace | None:
        """The trace of ``request_id``: from the ring, else from the trace store (None:
        unknown or forgotten)."""
        trace = self.ring.get(request_id)
        if trace is None and self.store is not None:
            trace = await self.store.get(request_id)
        return trace

    async def close(self) -> None:
        """Write the request log lines still held (``observe/logging.py``) and what the
        audit and the trace store have queued, export the spans still queued; close them."""
        lines = direct_lines()
        if lines is not None:
            lines.flush()
        for part in (self.audit, self.store, self.otlp):
            if part is not None:
                await part.close()

    def _measure(self, trace: Trace, stream: bool) -> None:
        s, m = trace.summary, self.metrics
        key = (s.get("pool", "none"), s.get("backend", "none"), s.get("intent", "none"),
               s.get("strategy", "none"), str(trace.status), s.get("api", "chat"))
        count, duration, tokens_in, tokens_out, ttft, tpot = self._series.get(key) \
            or self._labelled(key)
        count.inc()
        duration.observe(trace.duration_ms / 1000)
        tokens_in.observe(s.get("tokens_in", 0))
        out = s.get("tokens_out", 0)
        tokens_out.observe(out)
        decision = 0.0
        for step in trace.steps:
            if step.name in DECISION_STEPS:
                decision += step.duration_ms
            if step.name == "gate":
                self._child(m.gate, step.fields["source"]).observe(step.duration_ms / 1000)
            elif step.name == "attempt" and stream and step.fields["ttft_ms"] is not None:
                self._child(m.legs, step.fields["backend"]).inc()
                _bump(m.melt.legs, step.fields["backend"])
            elif step.name == "handoff":
                _bump(m.melt.handoffs, step.fields["backend"])
        if decision:
            m.decision.observe(decision / 1000)
        spent = s.get("cost_by_pool")
        if spent:
            self._spend(spent, s.get("tenant", "none"), s.get("key_id", "none"))
        first = s.get("ttft_ms")
        if stream and first is not None:
            ttft.observe(first / 1000)
            if out > 1:
                tpot.observe(max(trace.duration_ms - first, 0.0) / 1000 / (out - 1))

    def _spend(self, by_pool: dict[str, float], tenant: str, key: str) -> None:
        """``llmroute_cost_total{pool, tenant, key}`` += each pool's spend."""
        for pool, cost in by_pool.items():
            self._child(self.metrics.cost, pool, tenant, key).inc(cost)

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once per metric and label set, as
        ``_labelled`` does (``labels()`` takes a lock and builds a tuple per call)."""
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _labelled(self, key: tuple[str, ...]) -> tuple[Any, ...]:
        """The request's labelled series for ``key`` (pool, backend, intent, strategy,
        status, api), made once: ``labels()`` takes a lock and builds a tuple per call."""
        m, where = self.metrics, key[:2]
        series = (m.requests.labels(*key), m.duration.labels(*where),
                  m.tokens.labels(*where, "input"), m.tokens.labels(*where, "output"),
                  m.ttft.labels(*where), m.tpot.labels(*where))
        self._series[key] = series
        return series

    def _log(self, trace: Trace, rec: Recorder) -> None:
        """The request's log line at info: written by the JSON renderer itself when
        structlog runs ``configure_logging``'s JSON chain (``observe/logging.py``: the same
        bytes at a third of the cost), else through structlog."""
        lines = direct_lines()
        if lines is None:
            if log.is_enabled_for(logging.INFO):
                log.info("request", **self._line(trace, rec))
        elif lines.min_level <= logging.INFO:
            lines.info("request", self._line(trace, rec))

    def _line(self, trace: Trace, rec: Recorder) -> dict[str, Any]:
        s = trace.summary
        line = {"request_id": trace.request_id}
        for key in SUMMARY_KEYS:  # a loop, not a merged comprehension: ~4k instructions less
            if key in s:
                line[key] = s[key]
        line["status"] = trace.status
        line["ttft_ms"] = s.get("ttft_ms")
        line["duration_ms"] = round_us(trace.duration_ms)
        line["tokens_in"] = s.get("tokens_in")
        line["tokens_out"] = s.get("tokens_out")
        line["handoffs"] = len(s.get("handoffs", ()))
        if "cost" in s:
            line["cost"] = s["cost"]
        if self.config.log_prompts:
            line["prompt"], line["answer"] = rec.prompt, rec.answer
        return line


def _bump(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def make_observer(config: ObserveConfig, metrics: Metrics,
                  context: TraceContext | None = None) -> Observer:
    """The Observer for ``config`` over ``metrics`` and ``context`` (the audit and the trace
    store only when they have a path, the export only when configured; no I/O: databases
    open on their first write, the exporter connects on its first batch)."""
    a, t = config.audit, config.trace_store
    audit = None if a.path is None else AuditLog(a.path, a.retention_days, a.queue,
                                                 metrics.audit_dropped, metrics.audit_failures)
    store = None if t.path is None else TraceStore(t, metrics.trace_store_dropped,
                                                   metrics.trace_store_failures)
    otlp = None
    if config.otlp is not None:
        from llmroute.observe.otlp import make_export

        otlp = make_export(config.otlp)
    return Observer(config, metrics, audit, context, store, otlp)
