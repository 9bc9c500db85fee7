"""OpenTelemetry export of finished traces (``observe.otlp`` in the config; off by default).

Each finished ``Trace`` becomes one request span (kind SERVER; its id is the trace's
``span_id``, its parent the incoming ``traceparent``'s parent-id, its trace id the W3C one)
and one child span per step: ``llmroute.<step>`` (INTERNAL) and, for each attempt, a
CLIENT span ``chat <model>`` whose id is the one that attempt's engine call carried in its
``traceparent``. Attributes follow the OpenTelemetry GenAI semantic conventions where one
fits (``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.response.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons``) and
``llmroute.*`` for the rest (intent, strategy, pool, backend, tenant, request id).

The spans are built from the finished trace (the Observer calls ``export`` after the
response) and handed to the SDK's ``BatchSpanProcessor``, whose own thread batches and
posts them with the OTLP/HTTP protobuf exporter: the request path pays for building a few
small objects and a queue append; a full queue drops spans (the SDK counts and logs it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from llmroute.config.observe import OtlpConfig
from llmroute.observe.trace import Step, Trace, new_span_id, w3c_trace_id

SCOPE = InstrumentationScope("llmroute")
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
SUMMARY_ATTRS = {"intent": "llmroute.intent", "strategy": "llmroute.strategy",
                 "pool": "llmroute.pool", "backend": "llmroute.backend",
                 "tenant": "llmroute.tenant", "key_id": "llmroute.key_id"}
Attrs = dict[str, Any]


class OtlpExport:
    """Exports finished traces as OTel spans through ``processor`` (a BatchSpanProcessor
    over the OTLP/HTTP exporter, see ``make_export``) with ``resource``."""

    def __init__(self, processor: BatchSpanProcessor, resource: Resource):
        self._processor, self._resource = processor, resource

    def export(self, trace: Trace) -> None:
        """Queue ``trace``'s spans for export; never waits on the network."""
        for span in spans(trace, self._resource):
            self._processor.on_end(span)

    async def close(self) -> None:
        """Export what is queued (bounded by the exporter's timeout) and stop its thread."""
        await asyncio.to_thread(self._processor.shutdown)


def make_export(config: OtlpConfig) -> OtlpExport:
    """The export ``config`` describes (starts the batch processor's thread; no I/O)."""
    exporter = OTLPSpanExporter(endpoint=config.endpoint, headers=dict(config.headers),
                                timeout=config.timeout_s)
    processor = BatchSpanProcessor(exporter, max_queue_size=config.queue,
                                   export_timeout_millis=config.timeout_s * 1000)
    return OtlpExport(processor, Resource.create({"service.name": config.service_name}))


def spans(trace: Trace, resource: Resource) -> list[ReadableSpan]:
    """The request span of ``trace`` followed by one child span per step."""
    tid = int(w3c_trace_id(trace.trace_id), 16)
    me = SpanContext(tid, int(trace.span_id or new_span_id(), 16), False, SAMPLED)
    parent = None if trace.parent_span_id is None else SpanContext(
        tid, int(trace.parent_span_id, 16), True, SAMPLED)
    t0 = int(trace.at * 1e9)
    status = Status(StatusCode.ERROR) if trace.status >= 500 else Status(StatusCode.UNSET)
    out = [ReadableSpan("llmroute.request", me, parent, resource, request_attrs(trace),
                        kind=SpanKind.SERVER, status=status, start_time=t0,
                        end_time=t0 + int(trace.duration_ms * 1e6),
                        instrumentation_scope=SCOPE)]
    for step in trace.steps:
        out.append(_step_span(step, tid, me, resource, t0))
    return out


def request_attrs(trace: Trace) -> Attrs:
    """The request span's attributes (GenAI conventions + ``llmroute.*``)."""
    s = trace.summary
    attrs: Attrs = {"gen_ai.operation.name": "chat", "llmroute.request_id": trace.request_id,
                    "http.response.status_code": trace.status,
                    "llmroute.handoffs": len(s.get("handoffs", ()))}
    attrs.update({v: s[k] for k, v in SUMMARY_ATTRS.items() if isinstance(s.get(k), str)})
    model = next((st.fields.get("model") for st in trace.steps
                  if st.name == "attempt" and st.fields.get("ok")), None)
    _put(attrs, "gen_ai.response.model", model)
    _put(attrs, "gen_ai.usage.input_tokens", s.get("tokens_in"))
    _put(attrs, "gen_ai.usage.output_tokens", s.get("tokens_out"))
    if isinstance(s.get("finish_reason"), str):
        attrs["gen_ai.response.finish_reasons"] = (s["finish_reason"],)
    _put(attrs, "llmroute.ttft_ms", s.get("ttft_ms"))
    _put(attrs, "error.type", s.get("error"))
    return attrs


def _step_span(step: Step, tid: int, parent: SpanContext, resource: Resource,
               t0: int) -> ReadableSpan:
    f = step.fields
    attempt = step.name == "attempt"
    span_id = f.get("span_id") if attempt else None
    ctx = SpanContext(tid, int(span_id or new_span_id(), 16), False, SAMPLED)
    start = t0 + int(step.start_ms * 1e6)
    failed = attempt and not f.get("ok") and f.get("error") is not None
    return ReadableSpan(
        f"chat {f.get('model') or f.get('backend')}" if attempt else f"llmroute.{step.name}",
        ctx, parent, resource, step_attrs(step),
        kind=SpanKind.CLIENT if attempt else SpanKind.INTERNAL,
        status=Status(StatusCode.ERROR, f["error"]) if failed else Status(StatusCode.UNSET),
        start_time=start, end_time=start + int(step.duration_ms * 1e6),
        instrumentation_scope=SCOPE)


def step_attrs(step: Step) -> Attrs:
    """A step span's attributes: its scalar fields as ``llmroute.<field>`` (an attempt's
    also as GenAI ones; an anchor's candidates as the list of backend ids)."""
    f = step.fields
    attrs: Attrs = {"llmroute.step": step.name}
    for key, value in f.items():
        if isinstance(value, str | bool | int | float):
            attrs[f"llmroute.{key}"] = value
    if step.name == "attempt":
        attrs["gen_ai.operation.name"] = "chat"
        _put(attrs, "gen_ai.request.model", f.get("model"))
        _put(attrs, "gen_ai.usage.output_tokens", f.get("tokens"))
        _put(attrs, "http.response.status_code", f.get("status"))
    elif step.name == "anchor":
        attrs["llmroute.candidates"] = tuple(c["backend"] for c in f.get("candidates", ()))
    return attrs


def _put(attrs: Attrs, key: str, value: Any) -> None:
    if value is not None:
        attrs[key] = value
