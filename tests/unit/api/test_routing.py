"""The request path end to end over scripted upstreams on loopback: headers, passthrough,
pools and served models, both endpoints, disconnects."""

from __future__ import annotations

import asyncio
import re
import uuid

import httpx
import pytest
from fakes.router import make_config, open_router

from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"


def chat(content: str = "hi", **extra):
    return {"model": "auto", "messages": [{"role": "user", "content": content}], **extra}


async def test_non_streamed_chat_passes_fields_through_and_sets_headers():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url,
                            "model": "served-x"}])
        async with open_router(cfg) as (_, client):
            body = chat(stop=["\n"], max_completion_tokens=7, my_engine_flag={"k": 1},
                        logprobs=True, top_logprobs=3)
            r = await client.post(CHAT, json=body, headers={"x-request-id": "req-42"})
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "Hello from the fake engine."
    assert r.headers["x-request-id"] == "req-42"
    assert r.headers["x-llmroute-backend"] == "a"
    assert r.headers["x-llmroute-pool"] == "general"
    assert r.headers["x-llmroute-intent"]
    assert re.fullmatch(r"gate;dur=\d+\.\d{3}", r.headers["server-timing"])
    sent = up.requests[0]
    assert sent["model"] == "served-x"
    assert sent["my_engine_flag"] == {"k": 1} and sent["stop"] == ["\n"]
    assert sent["top_logprobs"] == 3 and sent["max_completion_tokens"] == 7


async def test_tools_pass_through_unchanged():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat("weather?", tools=tools, tool_choice="auto"))
    assert up.requests[0]["tools"] == tools and up.requests[0]["tool_choice"] == "auto"
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == \
        "get_weather"
    assert r.headers["x-llmroute-intent"] == "tool_call"


async def test_generated_request_id_is_on_errors_too():
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    async with open_router(cfg) as (_, client):
        r = await client.post(CHAT, json={**chat(), "model": "nope"})
    assert r.status_code == 404 and len(r.headers["x-request-id"]) == 32


async def test_generated_request_ids_are_uuid7_in_arrival_order():
    """Ids the router makes are UUIDv7 hex (RFC 9562): version 7, RFC variant, and their
    text sorts as they were made (the audit's request_id index grows at one end)."""
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    ids = []
    async with open_router(cfg) as (_, client):
        for _ in range(3):
            r = await client.post(CHAT, json={**chat(), "model": "nope"})
            ids.append(r.headers["x-request-id"])
            await asyncio.sleep(0.002)
    parsed = [uuid.UUID(hex=i) for i in ids]
    assert [u.version for u in parsed] == [7] * 3
    assert all(u.variant == uuid.RFC_4122 for u in parsed)
    assert ids == sorted(ids) and len(set(ids)) == 3


async def test_model_selects_pool_or_served_model():
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": a.base_url,
                            "model": "small"},
                           {"id": "b", "pool": "long", "base_url": b.base_url,
                            "model": "big"}])
        async with open_router(cfg) as (_, client):
            by_pool = await client.post(CHAT, json={**chat(), "model": "long"})
            by_name = await client.post(CHAT, json={**chat(), "model": "small"})
            models = await client.get("/v1/models")
    assert by_pool.headers["x-llmroute-backend"] == "b"
    assert by_pool.headers["x-llmroute-pool"] == "long"
    assert by_name.headers["x-llmroute-backend"] == "a"
    ids = [m["id"] for m in models.json()["data"]]
    assert ids == ["auto", "general", "long", "small", "big"]


async def test_completions_endpoint():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (_, client):
            r = await client.post("/v1/completions",
                                  json={"model": "auto", "prompt": "Once upon", "max_tokens": 5})
    assert r.status_code == 200
    assert up.requests[0]["prompt"] == "Once upon"


@pytest.mark.parametrize(("stream", "step"), [(True, ("stall", 30)), (True, ("hang", 30)),
                                              (False, ("hang", 30))],
                         ids=["sse-mid-stream", "sse-before-first-chunk", "json"])
async def test_client_disconnect_cancels_upstream(stream, step):
    async with serve_upstream([step]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (rt, _), serve_in_background(create_app(cfg, runtime=rt)) as url:
            async with httpx.AsyncClient(base_url=url) as client:
                with pytest.raises(httpx.ReadTimeout):
                    await client.post(CHAT, json=chat(stream=stream), timeout=0.5)
            for _ in range(100):
                if up.cancelled:
                    break
                await asyncio.sleep(0.02)
            assert rt.stats.snapshot(0).stats["a"].in_flight == 0
    assert up.cancelled == 1


async def test_health_is_alive():
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    async with open_router(cfg) as (_, client):
        r = await client.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


async def test_client_gone_while_sending_its_body_is_not_an_error():
    from structlog.testing import capture_logs

    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    async with open_router(cfg) as (rt, client), \
            serve_in_background(create_app(cfg, runtime=rt)) as url:
        host, port = url.removeprefix("http://").split(":")
        with capture_logs() as logs:
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                         b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n"
                         b'{"model": "auto", ')
            await writer.drain()
            writer.close()
            await asyncio.sleep(0.3)
        health = await client.get("/health")
    assert health.status_code == 200
    assert [e for e in logs if e["log_level"] in ("error", "critical")] == []


@pytest.mark.parametrize("given", ["x" * 10_000, "a" * 129, "ÿþabc", "a b", "a/b", "..", ""])
async def test_a_client_request_id_unfit_to_forward_is_replaced(given):
    """A client id that is too long (> 128 characters), not visible ASCII, or holds path
    characters is neither forwarded to the engine nor echoed: the request gets an id of its
    own; a fit one (128 characters, say) is kept as sent."""
    async with serve_upstream(["ok", "ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat(), headers={
                "x-request-id": given.encode("latin-1")})
            kept = await client.post(CHAT, json=chat(), headers={"x-request-id": "k" * 128})
    assert r.status_code == 200 and uuid.UUID(hex=r.headers["x-request-id"]).version == 7
    assert kept.headers["x-request-id"] == "k" * 128
    assert up.headers[0]["x-request-id"] == r.headers["x-request-id"]  # the new one
