"""Traces on the real request path over scripted upstreams: every step with its timing and
decision, attempts and handoffs, the W3C trace id, the ring's bound, and bad ids."""

from __future__ import annotations

from typing import Any

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"


def chat(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": "auto", "stream": stream,
            "messages": [{"role": "user", "content": "Tell me about the fox."}], **extra}


def backends(*ups: Any) -> list[dict[str, Any]]:
    return [{"id": f"b{i}", "pool": "general", "base_url": up.base_url}
            for i, up in enumerate(ups)]


def names(trace: dict[str, Any]) -> list[str]:
    return [s["step"] for s in trace["steps"]]


async def test_a_request_trace_shows_every_step_with_timing():
    async with serve_upstream(["ok"]) as up, \
            open_router(make_config(backends(up))) as (_, client):
        r = await client.post(CHAT, json=chat(), headers={"x-request-id": "req-1"})
        t = (await client.get("/trace/req-1")).json()
    assert r.status_code == 200
    assert names(t) == ["receive", "gate", "strategy", "anchor", "attempt", "response"]
    assert t["request_id"] == "req-1" and t["trace_id"] == "req-1" and t["status"] == 200
    assert t["intent"] == r.headers["x-llmroute-intent"]
    assert t["strategy"] == r.headers["x-llmroute-strategy"] and t["pool"] == "general"
    assert t["backend"] == "b0" and t["tokens_out"] == 5 and t["finish_reason"] == "stop"
    steps = {s["step"]: s for s in t["steps"]}
    assert steps["gate"]["intent"] == t["intent"] and "confidence" in steps["gate"]
    assert steps["gate"]["source"] and isinstance(steps["gate"]["runners_up"], list)
    assert steps["anchor"]["candidates"][0]["backend"] == "b0"
    assert steps["attempt"]["ok"] and steps["attempt"]["status"] == 200
    assert steps["response"]["usage"]["completion_tokens"] == 5
    offsets = [s["start_ms"] for s in t["steps"]]
    assert offsets == sorted(offsets)
    assert all(s["duration_ms"] >= 0 for s in t["steps"])
    assert t["duration_ms"] >= steps["attempt"]["start_ms"] + steps["attempt"]["duration_ms"]


async def test_a_failover_appears_in_the_trace():
    async with serve_upstream([("status", 503)]) as a, serve_upstream(["ok"]) as b, \
            open_router(make_config(backends(a, b))) as (_, client):
        for i in range(4):  # whichever backend is ranked first, some request meets a's 503
            await client.post(CHAT, json=chat(), headers={"x-request-id": f"fo{i}"})
        traces = [(await client.get(f"/trace/fo{i}")).json() for i in range(4)]
    attempts = [[s for s in t["steps"] if s["step"] == "attempt"] for t in traces]
    assert all(a[-1]["ok"] and a[-1]["status"] == 200 for a in attempts)
    failed = [s for a in attempts for s in a if not s["ok"]]
    assert failed and failed[0]["backend"] == "b0" and failed[0]["status"] == 503
    assert "scripted 503" in failed[0]["error"]


async def test_a_handoff_is_in_the_trace_and_the_melt_rate():
    async with serve_upstream([("cut", 2)], "The quick brown fox") as a, \
            serve_upstream(["ok"], " jumps.") as b:
        async with open_router(make_config(backends(a, b))) as (_, client):
            r = await client.post(CHAT, json=chat(stream=True), headers={"x-request-id": "h"})
            t = (await client.get("/trace/h")).json()
            metrics = (await client.get("/metrics")).text
    assert r.status_code == 200
    first = t["steps"][names(t).index("attempt")]["backend"]
    handoff = next(s for s in t["steps"] if s["step"] == "handoff")
    assert handoff["backend"] == first and handoff["reason"] == "cut"
    assert handoff["at_token"] == 2 and handoff["to"] != first
    assert t["handoffs"] == [[first, "cut"]] and t["ttft_ms"] is not None
    assert [s["ok"] for s in t["steps"] if s["step"] == "attempt"] == [False, True]
    assert names(t)[-4:] == ["attempt", "handoff", "attempt", "response"]
    offsets = [s["start_ms"] for s in t["steps"]]
    assert offsets == sorted(offsets) and handoff["duration_ms"] >= 0
    assert f'llmroute_melt_rate{{backend="{first}"}} 1.0' in metrics
    assert f'llmroute_streamed_legs_total{{backend="{first}"}} 1.0' in metrics


async def test_traceparent_gives_the_trace_id():
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with serve_upstream(["ok"]) as up, \
            open_router(make_config(backends(up))) as (_, client):
        await client.post(CHAT, json=chat(), headers={"x-request-id": "w3c",
                                                      "traceparent": tp})
        await client.post(CHAT, json=chat(), headers={"x-request-id": "bad",
                                                      "traceparent": "00-zz-11-01"})
        good = (await client.get("/trace/w3c")).json()
        bad = (await client.get("/trace/bad")).json()
    assert good["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert bad["trace_id"] == "bad"


async def test_generated_ids_are_traced_and_errors_too():
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    async with open_router(cfg) as (_, client):
        r = await client.post(CHAT, json=chat())
        t = (await client.get(f"/trace/{r.headers['x-request-id']}")).json()
        bad_json = await client.post(CHAT, content=b"{", headers={"x-request-id": "broken",
                                                                   "content-type":
                                                                   "application/json"})
        broken = (await client.get("/trace/broken")).json()
    assert r.status_code == 503 and t["status"] == 503 and "error" in t
    assert [s["ok"] for s in t["steps"] if s["step"] == "attempt"] == [False]
    assert bad_json.status_code == 400 and broken["status"] == 400
    assert names(broken) == ["response"]


async def test_the_ring_keeps_only_the_newest_traces():
    async with serve_upstream(["ok"]) as up, \
            open_router(make_config(backends(up), observe={"trace_ring": 2})) as (_, client):
        for i in range(3):
            await client.post(CHAT, json=chat(), headers={"x-request-id": f"r{i}"})
        codes = [(await client.get(f"/trace/r{i}")).status_code for i in range(3)]
    assert codes == [404, 200, 200]


@pytest.mark.parametrize("rid", ["x" * 129, "x" * 10_000, "a%2Fb", "a/b", "a\\b", "a b",
                                 "a%09b", "..%2Fetc%2Fpasswd", "%C3%A9t%C3%A9"],
                         ids=["129", "10k", "pct", "slash", "backslash", "space", "tab",
                              "dotdot", "non-ascii"])
async def test_bad_trace_ids_are_400(rid):
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    async with open_router(cfg) as (_, client):
        r = await client.get("/trace/" + rid)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


async def test_unknown_trace_id_is_an_openai_404():
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    async with open_router(cfg) as (_, client):
        r = await client.get("/trace/nobody")
        longest = await client.get("/trace/" + "x" * 128)  # the longest id a request keeps
    assert longest.status_code == 404, longest.text
    assert r.status_code == 404
    assert r.json()["error"] == {"message": r.json()["error"]["message"],
                                 "type": "not_found_error", "param": "request_id",
                                 "code": "not_found"}
