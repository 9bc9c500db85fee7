"""gate kind ``off``: every request routes to the default pool without classification."""

from __future__ import annotations

from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.assemble.gate import make_gate
from llmroute.gate.off import NoGate


async def test_off_gate_routes_auto_to_the_default_pool():
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": a.base_url},
                           {"id": "b", "pool": "code", "base_url": b.base_url}],
                          gate={"kind": "off"})
        cfg = cfg.model_copy(update={"routing": cfg.routing.model_copy(
            update={"intents": {"code": "code"}})})
        assert isinstance(make_gate(cfg), NoGate)
        async with open_router(cfg) as (_, client):
            r = await client.post("/v1/chat/completions", json={"model": "auto", "messages": [
                {"role": "user", "content": "Write a Python function to sort a list"}]})
    assert r.headers["x-llmroute-intent"] == "chat"
    assert r.headers["x-llmroute-pool"] == "general" and b.requests == []
