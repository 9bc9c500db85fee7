"""W3C trace context to the engines and the OTLP/HTTP export of finished traces, against a
real OTLP/HTTP receiver on loopback (decoding the protobuf export requests)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from fakes.http import serve_app
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from llmroute.observe.trace import parent_span_of, w3c_trace_id

CHAT = "/v1/chat/completions"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TP = f"00-{TRACE}-{PARENT}-01"


def chat(stream: bool = False) -> dict[str, Any]:
    return {"model": "auto", "stream": stream,
            "messages": [{"role": "user", "content": "Tell me about the fox."}]}


def backends(*ups: Any) -> list[dict[str, Any]]:
    return [{"id": f"b{i}", "pool": "general", "base_url": up.base_url, "model": f"m{i}"}
            for i, up in enumerate(ups)]


@contextlib.asynccontextmanager
async def otlp_receiver() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback OTLP/HTTP traces endpoint; yields its URL and the spans it received
    (as dicts: name, ids in hex, kind, attributes, service)."""
    spans: list[dict[str, Any]] = []

    async def export(request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("content-encoding") == "gzip":
            raw = gzip.decompress(raw)
        req = ExportTraceServiceRequest.FromString(raw)
        for rs in req.resource_spans:
            service = {a.key: a.value.string_value for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                spans.extend(_span(s, service["service.name"]) for s in ss.spans)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", export)
    async with serve_app(app) as url:
        yield f"{url}/v1/traces", spans


def _span(s: Any, service: str) -> dict[str, Any]:
    attrs = {a.key: _value(a.value) for a in s.attributes}
    return {"name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
            "parent": s.parent_span_id.hex() or None, "kind": s.kind, "attrs": attrs,
            "service": service, "start": s.start_time_unix_nano,
            "end": s.end_time_unix_nano}


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind)


def traced(url: str, *ups: Any, timeout_s: float = 10.0) -> Any:
    return make_config(backends(*ups), observe={"otlp": {
        "endpoint": url, "service_name": "router-a", "timeout_s": timeout_s}})


def sent_span(up: Any, i: int = 0) -> tuple[str, str]:
    """(trace id, span id) of the ``traceparent`` the engine got with its ``i``-th call."""
    version, trace, span, flags = up.headers[i]["traceparent"].split("-")
    assert version == "00" and flags == "01"
    return trace, span


async def test_an_exported_trace_is_the_request_span_with_a_child_per_step():
    async with otlp_receiver() as (url, spans), serve_upstream(["ok"]) as up:
        async with open_router(traced(url, up)) as (rt, client):
            r = await client.post(CHAT, json=chat(), headers={"x-request-id": "o1",
                                                              "traceparent": TP})
            t = (await client.get("/trace/o1")).json()
            await rt.observer.close()
    assert r.status_code == 200
    root = next(s for s in spans if s["name"] == "llmroute.request")
    assert root["trace_id"] == TRACE and root["parent"] == PARENT
    assert root["span_id"] == t["span_id"] and root["service"] == "router-a"
    kids = [s for s in spans if s is not root]
    assert {s["parent"] for s in kids} == {root["span_id"]}
    assert {s["trace_id"] for s in spans} == {TRACE}
    assert sorted(s["name"] for s in kids) == sorted(
        ["llmroute.receive", "llmroute.gate", "llmroute.strategy", "llmroute.anchor",
         "chat m0", "llmroute.response"])
    assert len({s["span_id"] for s in spans}) == len(spans)
    a = root["attrs"]
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.response.model"] == "m0"
    assert a["gen_ai.usage.output_tokens"] == 5 and a["gen_ai.usage.input_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert a["llmroute.intent"] == r.headers["x-llmroute-intent"]
    assert a["llmroute.strategy"] == r.headers["x-llmroute-strategy"]
    assert a["llmroute.pool"] == "general" and a["llmroute.backend"] == "b0"
    assert a["llmroute.request_id"] == "o1" and a["http.response.status_code"] == 200
    call = next(s for s in kids if s["name"] == "chat m0")
    assert call["attrs"]["gen_ai.request.model"] == "m0" and call["kind"] == 3  # CLIENT
    assert sent_span(up) == (TRACE, call["span_id"])
    assert root["start"] <= call["start"] <= call["end"] <= root["end"]
    gate = next(s for s in kids if s["name"] == "llmroute.gate")
    assert gate["attrs"]["llmroute.intent"] == a["llmroute.intent"]


async def test_each_leg_of_a_handoff_carries_its_own_span_under_the_request_span():
    async with otlp_receiver() as (url, spans), \
            serve_upstream([("cut", 2)], "The quick brown fox") as a, \
            serve_upstream(["ok"], " jumps.") as b:
        async with open_router(traced(url, a, b)) as (rt, client):
            r = await client.post(CHAT, json=chat(stream=True),
                                  headers={"x-request-id": "o2", "traceparent": TP})
            t = (await client.get("/trace/o2")).json()
            await rt.observer.close()
    assert r.status_code == 200 and t["handoffs"]
    sent = [sent_span(up) for up in (a, b) for _ in up.headers]
    assert len(sent) == 2 and {tr for tr, _ in sent} == {TRACE}
    attempts = [s for s in t["steps"] if s["step"] == "attempt"]
    assert {s["span_id"] for s in attempts} == {span for _, span in sent}
    root = next(s for s in spans if s["name"] == "llmroute.request")
    calls = [s for s in spans if s["name"].startswith("chat ")]
    assert {s["span_id"] for s in calls} == {span for _, span in sent}
    assert {s["parent"] for s in calls} == {root["span_id"]}
    assert any(s["name"] == "llmroute.handoff" for s in spans)


async def test_without_a_traceparent_the_engine_gets_a_new_trace():
    async with serve_upstream(["ok"]) as up, \
            open_router(make_config(backends(up))) as (_, client):
        await client.post(CHAT, json=chat(), headers={"x-request-id": "client-id"})
        await client.post(CHAT, json=chat())
        t = (await client.get("/trace/client-id")).json()
    own, generated = sent_span(up, 0), sent_span(up, 1)
    assert own[0] == w3c_trace_id("client-id") and t["parent_span_id"] is None
    assert generated[0] != own[0] and own[1] != generated[1]
    assert own[1] == t["steps"][[s["step"] for s in t["steps"]].index("attempt")]["span_id"]


async def test_an_unreachable_collector_costs_the_requests_nothing():
    async with serve_upstream(["ok"]) as up, \
            open_router(traced("http://127.0.0.1:9/v1/traces", up, timeout_s=1)
                        ) as (rt, client):
        rs = [await client.post(CHAT, json=chat()) for _ in range(3)]
        await asyncio.wait_for(rt.observer.close(), 30)
    assert [r.status_code for r in rs] == [200] * 3


@pytest.mark.parametrize(("header", "parent"), [
    (TP, PARENT), (TP.upper(), PARENT), (f"00-{TRACE}-{'0' * 16}-01", None),
    (f"00-{'0' * 32}-{PARENT}-01", None), ("00-zz-11-01", None), ("", None), (None, None)],
    ids=["valid", "upper-case", "zero-span", "zero-trace", "malformed", "empty", "absent"])
def test_the_parent_span_of_a_traceparent(header, parent):
    assert parent_span_of(header) == parent


@given(st.text(max_size=64))
def test_every_id_maps_to_a_valid_w3c_trace_id(rid):
    tid = w3c_trace_id(rid)
    assert len(tid) == 32 and set(tid) <= set("0123456789abcdef") and tid != "0" * 32
    assert w3c_trace_id(tid) == tid
