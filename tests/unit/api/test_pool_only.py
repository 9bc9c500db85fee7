"""A pool named in ``model`` is served by that pool only: a dead pool is a 503 naming it,
never another pool's model — unless ``routing.cross_pool_fallback`` allows it."""

from __future__ import annotations

from typing import Any

from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"


def body(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}]}


def two_pools(general: Any, code: Any, **extra: Any) -> Any:
    return make_config([{"id": "g", "pool": "general", "base_url": general.base_url},
                        {"id": "c", "pool": "code", "base_url": code.base_url}],
                       gate={"kind": "rules"}, **extra)


async def test_a_dead_named_pool_is_a_503_naming_it_not_another_pools_answer():
    async with serve_upstream(["ok"]) as general, serve_upstream([("status", 503)]) as code:
        async with open_router(two_pools(general, code)) as (_, client):
            r = await client.post(CHAT, json=body("code"))
    assert r.status_code == 503
    assert "code" in r.json()["error"]["message"]
    assert general.requests == [] and len(code.requests) >= 1


async def test_cross_pool_fallback_lets_another_pool_answer():
    async with serve_upstream(["ok"]) as general, serve_upstream([("status", 503)]) as code:
        cfg = two_pools(general, code, routing={"default_pool": "general",
                                                 "cross_pool_fallback": True})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=body("code"))
    assert r.status_code == 200 and r.headers["x-llmroute-backend"] == "g"


async def test_auto_still_falls_back_across_pools():
    async with serve_upstream([("status", 503)]) as general, serve_upstream(["ok"]) as code:
        async with open_router(two_pools(general, code)) as (_, client):
            r = await client.post(CHAT, json=body("auto"))
    assert r.status_code == 200 and r.headers["x-llmroute-backend"] == "c"
