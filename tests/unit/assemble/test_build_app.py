"""``assemble.serve.build_app``: an app whose lifespan opens the Runtime and serves it."""

from __future__ import annotations

import httpx
from fakes.router import make_config
from fakes.upstream import serve_upstream

from llmroute.assemble.serve import build_app


async def test_the_lifespan_opens_the_runtime_and_the_app_routes_through_it():
    async with serve_upstream(["ok"]) as up:
        config = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                             gate={"kind": "off"})
        app = build_app(config)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://r") as client:
                r = await client.post("/v1/chat/completions", json={
                    "model": "auto", "messages": [{"role": "user", "content": "hi"}]})
            assert app.state.runtime.backends["a"].base_url == up.base_url
    assert r.status_code == 200 and r.headers["x-llmroute-backend"] == "a"
    assert len(up.requests) == 1
