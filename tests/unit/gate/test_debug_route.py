"""``GET /debug/route``: intent, complexity, plan and would-be backend; nothing is sent."""

from __future__ import annotations

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
