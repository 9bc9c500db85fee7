"""Strategies through the app (httpx.ASGITransport, scripted upstreams): the
x-llmroute-strategy header, GET /debug/strategies and the strategy in GET /debug/route."""

from __future__ import annotations

import textwrap

from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "explain this traceback"}]}


def config(base_a: str, base_b: str, folder=None):
    extra = {"strategies": {"dir": str(folder), "watch": False}} if folder else {}
    return make_config([{"id": "a", "pool": "general", "base_url": base_a},
                        {"id": "b", "pool": "errors", "base_url": base_b}],
                       gate={"kind": "rules"}, **extra)


async def test_without_strategies_every_answer_names_the_builtin():
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        async with open_router(config(a.base_url, b.base_url)) as (_, client):
            r = await client.post(CHAT, json=BODY)
            s = await client.post(CHAT, json={**BODY, "stream": True})
            listed = (await client.get("/debug/strategies")).json()
    assert r.status_code == 200 and r.headers["x-llmroute-strategy"] == "builtin-single@0"
    assert s.headers["x-llmroute-strategy"] == "builtin-single@0"
    assert listed["strategies"] == [] and listed["dir"] is None


async def test_a_matched_strategy_routes_and_names_itself(tmp_path):
    (tmp_path / "errors.yaml").write_text(textwrap.dedent("""\
        strategy_id: errors
        version: 4
        priority: 3
        when: {keywords: [traceback], model: [auto]}
        kind: single
        pool: errors
        """), encoding="utf-8")
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        async with open_router(config(a.base_url, b.base_url, tmp_path)) as (rt, client):
            hit = await client.post(CHAT, json=BODY)
            miss = await client.post(CHAT, json={**BODY, "messages": [
                {"role": "user", "content": "hi"}]})
            listed = (await client.get("/debug/strategies")).json()
            route = (await client.get("/debug/route", params={"query": "a traceback"})).json()
    assert (hit.headers["x-llmroute-strategy"], hit.headers["x-llmroute-pool"]) == \
        ("errors@4", "errors")
    assert len(b.requests) == 1
    assert miss.headers["x-llmroute-strategy"] == "builtin-single@0"
    assert [(s["header"], s["kind"], s["when"]["keywords"]) for s in listed["strategies"]] \
        == [("errors@4", "single", ["traceback"])]
    assert listed["last_reload"]["outcome"] == "loaded"
    assert route["strategy"] == {"strategy_id": "errors", "version": 4.0, "kind": "single",
                                 "header": "errors@4"}
    assert route["plan"]["pool"] == "errors"


async def test_debug_route_reads_the_request_headers_for_triggers(tmp_path):
    (tmp_path / "batch.json").write_text(
        '{"strategy_id": "batch", "version": 1, "kind": "single", "pool": "errors",'
        ' "when": {"priority_class": ["batch"]}}', encoding="utf-8")
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        async with open_router(config(a.base_url, b.base_url, tmp_path)) as (_, client):
            batch = await client.get("/debug/route", params={"query": "hi"},
                                     headers={"x-llmroute-priority": "batch"})
            online = await client.get("/debug/route", params={"query": "hi"})
    assert batch.json()["strategy"]["header"] == "batch@1"
    assert online.json()["strategy"]["header"] == "builtin-single@0"


async def test_a_header_trigger_fires_on_a_served_request(tmp_path):
    (tmp_path / "batch.json").write_text(
        '{"strategy_id": "batch", "version": 1, "kind": "single", "pool": "errors",'
        ' "when": {"priority_class": ["batch"]}}', encoding="utf-8")
    hi = {**BODY, "messages": [{"role": "user", "content": "hi"}]}
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        async with open_router(config(a.base_url, b.base_url, tmp_path)) as (_, client):
            batch = await client.post(CHAT, json=hi, headers={"x-llmroute-priority": "batch"})
            online = await client.post(CHAT, json=hi)
    assert (batch.headers["x-llmroute-strategy"], batch.headers["x-llmroute-pool"]) == \
        ("batch@1", "errors")
    assert online.headers["x-llmroute-strategy"] == "builtin-single@0"
    assert len(b.requests) == 1
