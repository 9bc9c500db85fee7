"""``POST /v1/embeddings``: routed by model to ``mode: embeddings`` backends with failover;
bad bodies are OpenAI-shaped 400s; chat never reaches an embeddings pool."""

from __future__ import annotations

import contextlib

import pytest
from aiohttp import web

from llmroute.config import parse_config
from llmroute.errors import ConfigError
from tests.fakes.router import make_config, open_router
from tests.fakes.upstream import serve_upstream


@contextlib.asynccontextmanager
async def embedder(status: int = 200, dims: int = 3):
    """An engine serving /v1/embeddings: one vector per input (``[len, i, 1.0…]``), or
    ``status`` with an OpenAI error body; ``seen`` keeps the bodies it received."""
    seen: list[dict] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        if status != 200:
            return web.json_response({"error": {"message": "boom", "type": "server_error"}},
                                     status=status)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i,
                 "embedding": [float(len(str(x))), float(i)] + [1.0] * (dims - 2)}
                for i, x in enumerate(inputs)]
        return web.json_response({"object": "list", "data": data, "model": body["model"],
                                  "usage": {"prompt_tokens": 7, "total_tokens": 7}})

    app = web.Application()
    app.router.add_post("/v1/embeddings", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def _backends(chat_url: str, *embed_urls: str) -> list[dict]:
    return [{"id": "chat", "pool": "chat", "model": "m", "base_url": chat_url},
            *({"id": f"e{i}", "pool": "embed", "model": "bge-small", "base_url": url,
               "mode": "embeddings"} for i, url in enumerate(embed_urls))]


@pytest.mark.parametrize("model", ["embed", "bge-small", "auto"])
async def test_routed_by_model_and_answered_as_the_engine_answered(model):
    async with serve_upstream(["ok"]) as chat, embedder() as (url, seen):
        async with open_router(make_config(_backends(chat.base_url, url))) as (_, client):
            r = await client.post("/v1/embeddings",
                                  json={"model": model, "input": ["hello", "你好世界"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["embedding"][:2] for d in body["data"]] == [[5.0, 0.0], [4.0, 1.0]]
    assert body["model"] == model and body["usage"]["total_tokens"] == 7
    assert r.headers["x-llmroute-backend"] == "e0" and r.headers["x-llmroute-pool"] == "embed"
    assert seen[0]["model"] == "bge-small"  # the served name goes upstream
    assert chat.requests == []


async def test_a_failing_embedder_fails_over_to_the_next():
    async with serve_upstream(["ok"]) as chat, embedder(status=500) as (bad, bad_seen), \
            embedder() as (good, good_seen):
        config = make_config(_backends(chat.base_url, bad, good))
        async with open_router(config) as (rt, client):
            rt.stats.finished("e1", 0, ok=True, latency_ms=900)  # rank e0 first
            r = await client.post("/v1/embeddings", json={"model": "embed", "input": "x"})
    assert r.status_code == 200 and r.headers["x-llmroute-backend"] == "e1"
    assert len(bad_seen) == 1 and len(good_seen) == 1


@pytest.mark.parametrize("body,param", [
    ({"model": "embed"}, "input"),
    ({"model": "embed", "input": []}, "input"),
    ({"model": "embed", "input": [""]}, "input"),
    ({"model": "embed", "input": 5}, "input"),
    ({"model": "embed", "input": "x", "encoding_format": "hex"}, "encoding_format"),
    ({"input": "x"}, "model"),
])
async def test_bad_bodies_are_openai_400s(body, param):
    async with serve_upstream(["ok"]) as chat, embedder() as (url, seen):
        async with open_router(make_config(_backends(chat.base_url, url))) as (_, client):
            r = await client.post("/v1/embeddings", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and seen == []


async def test_unknown_model_and_chat_models_are_not_embedders():
    async with serve_upstream(["ok"]) as chat, embedder() as (url, seen):
        async with open_router(make_config(_backends(chat.base_url, url))) as (_, client):
            unknown = await client.post("/v1/embeddings", json={"model": "nope", "input": "x"})
            chat_pool = await client.post("/v1/embeddings", json={"model": "chat",
                                                                   "input": "x"})
            as_chat = await client.post("/v1/chat/completions", json={
                "model": "embed", "messages": [{"role": "user", "content": "hi"}]})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert chat_pool.status_code == 404
    assert as_chat.status_code == 404 and seen == []


async def test_without_an_embeddings_backend_any_model_is_a_404_that_says_so():
    async with serve_upstream(["ok"]) as chat:
        async with open_router(make_config([{"id": "c", "pool": "general",
                                             "base_url": chat.base_url}])) as (_, client):
            r = await client.post("/v1/embeddings", json={"model": "auto", "input": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert "No embeddings backend is configured" in r.json()["error"]["message"]


async def test_auto_with_two_embedding_pools_is_ambiguous():
    async with serve_upstream(["ok"]) as chat, embedder() as (url, _):
        backends = _backends(chat.base_url, url) + [
            {"id": "z", "pool": "embed2", "model": "e5", "base_url": url, "mode": "embeddings"}]
        async with open_router(make_config(backends)) as (_, client):
            r = await client.post("/v1/embeddings", json={"model": "auto", "input": "x"})
    assert r.status_code == 400 and "embed, embed2" in r.json()["error"]["message"]


@pytest.mark.parametrize("extra,field", [
    ("  - {id: e, pool: general, engine: vllm, model: x, base_url: 'http://h:1', "
     "mode: embeddings}\n", "backends.1.mode: pool 'general' mixes"),
    ("  - {id: e, pool: emb, engine: vllm, model: x, base_url: 'http://h:1', "
     "mode: embeddings}\nrouting: {default_pool: emb}\n",
     "routing.default_pool: pool 'emb' serves embeddings"),
])
def test_config_keeps_embedders_out_of_chat_pools(extra, field):
    text = ("pools: {general: {}, emb: {}}\nbackends:\n"
            "  - {id: a, pool: general, engine: vllm, model: m, base_url: 'http://h:1'}\n"
            + extra)
    if "routing" not in extra:
        text += ("  - {id: f, pool: emb, engine: vllm, model: y, base_url: 'http://h:1', "
                 "mode: embeddings}\nrouting: {default_pool: general}\n")
    with pytest.raises(ConfigError, match=field):
        parse_config(text, "router.yaml")
