"""``GET /debug/route``: intent, complexity, plan and would-be backend; nothing is sent."""

from __future__ import annotations

import pytest
from fakes.router import make_config, open_router


async def test_debug_route_explains_without_sending() -> None:
    config = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"},
                          {"id": "c", "pool": "coder", "base_url": "http://127.0.0.1:9"}],
                         routing={"default_pool": "general", "intents": {"code": "coder"}})
    async with open_router(config) as (rt, client):
        resp = await client.get("/debug/route", params={"query": "write a python function"})
        assert resp.status_code == 200
        body = resp.json()
        assert body["intent"]["label"] == "code" and 0.1 <= body["complexity"] <= 5.0
        assert body["plan"]["pool"] == "coder" and body["backend"] == "c"
        assert all(s.in_flight == 0 for s in rt.stats.snapshot(rt.clock()).stats.values())
        missing = await client.get("/debug/route")
        assert missing.status_code == 400


async def test_debug_route_predicts_the_latency_in_ms() -> None:
    """Before any traffic the router cannot predict (nulls); after a few streamed answers
    its TTFT and per-token figures give ``ttft + output_tokens × per_output_token``."""
    from fakes.upstream import serve_upstream

    async with serve_upstream(["ok"], "one two three four five six seven eight") as up:
        config = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(config) as (_, client):
            cold = (await client.get("/debug/route", params={"query": "hi"})).json()
            for _ in range(3):
                await client.post("/v1/chat/completions", json={
                    "model": "auto", "stream": True,
                    "messages": [{"role": "user", "content": "hi"}]})
            warm = (await client.get("/debug/route",
                                     params={"query": "hi", "output_tokens": "100"})).json()
            bad = await client.get("/debug/route", params={"query": "hi",
                                                            "output_tokens": "-3"})
    assert cold["predicted_ms"] == {"ttft": None, "per_output_token": None, "latency": None}
    p = warm["predicted_ms"]
    assert p == warm["candidates"][0]["predicted_ms"]
    assert p["ttft"] > 0 and p["per_output_token"] > 0
    assert p["latency"] == pytest.approx(p["ttft"] + 100 * p["per_output_token"], abs=0.2)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "output_tokens"
