"""Dispatch over scripted upstreams on loopback, through the app: streaming to the end,
failover before the first byte, the retry budget, whom a failure blames, failures after the
first byte."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"


def chat(content: str = "hi", **extra):
    return {"model": "auto", "messages": [{"role": "user", "content": content}], **extra}


def sse_data(text: str) -> list[str]:
    return [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]


def two(a, b, **extra):
    return make_config([{"id": "a", "pool": "general", "base_url": a.base_url},
                        {"id": "b", "pool": "general", "base_url": b.base_url}], **extra)


async def test_streamed_chat_relays_every_chunk_then_done():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat(stream=True))
    assert r.headers["content-type"].startswith("text/event-stream")
    assert re.fullmatch(r"gate;dur=\d+\.\d{3}", r.headers["server-timing"])
    data = sse_data(r.text)
    assert data[-1] == "[DONE]"
    text = "".join(json.loads(d)["choices"][0]["delta"].get("content") or ""
                   for d in data[:-1])
    assert text == "Hello from the fake engine."


async def test_stream_without_done_still_ends_cleanly():
    async with serve_upstream(["no_done"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat(stream=True))
    assert sse_data(r.text)[-1] == "[DONE]"


@pytest.mark.parametrize("failure", [("status", 500), ("status", 503), ("status", 429, 0),
                                     ("status", 404), ("status", 401)],
                         ids=["500", "503", "429", "404-misconfigured", "401-bad-key"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_fails_over_before_first_byte(failure, stream):
    async with serve_upstream([failure]) as bad, serve_upstream(["ok"]) as good:
        async with open_router(two(bad, good)) as (_, client):
            r = await client.post(CHAT, json=chat(stream=stream))
    assert r.status_code == 200
    assert r.headers["x-llmroute-backend"] == "b"
    assert len(bad.requests) == 1 and len(good.requests) == 1


async def test_connect_error_fails_over_and_opens_breaker():
    async with serve_upstream(["ok"]) as good:
        cfg = make_config([{"id": "dead", "pool": "general", "base_url": "http://127.0.0.1:9"},
                           {"id": "b", "pool": "general", "base_url": good.base_url}],
                          breaker={"min_requests": 1, "cooldown_s": 60})
        async with open_router(cfg) as (rt, client):
            first = await client.post(CHAT, json=chat())
            second = await client.post(CHAT, json=chat())
            ready = await client.get("/ready")
    assert first.headers["x-llmroute-backend"] == "b"
    assert second.headers["x-llmroute-backend"] == "b"
    assert len(good.requests) == 2
    assert ready.status_code == 200 and ready.json()["usable_backends"] == ["b"]


async def test_all_backends_failing_gives_503_with_retry_after():
    async with serve_upstream([("status", 503)]) as a, serve_upstream([("status", 502)]) as b:
        async with open_router(two(a, b)) as (_, client):
            r = await client.post(CHAT, json=chat())
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "no_backend_available"
    assert int(r.headers["retry-after"]) >= 1


async def test_retry_budget_is_respected():
    async with serve_upstream([("status", 503)]) as a, serve_upstream([("status", 503)]) as b:
        async with open_router(two(a, b, retry={"max_attempts": 1})) as (_, client):
            r = await client.post(CHAT, json=chat())
    assert r.status_code == 503
    assert len(a.requests) + len(b.requests) == 1


async def test_a_500_every_backend_gives_is_the_requests_fault_not_the_engines():
    async with serve_upstream([("status", 500)]) as a, serve_upstream([("status", 500)]) as b:
        cfg = two(a, b, breaker={"min_requests": 1, "cooldown_s": 60})
        async with open_router(cfg) as (rt, client):
            r = await client.post(CHAT, json=chat())
            ready = await client.get("/ready")
    assert r.status_code == 502
    assert "every backend rejected" in r.json()["error"]["message"]
    assert len(a.requests) == 1 and len(b.requests) == 1
    assert ready.json()["usable_backends"] == ["a", "b"]


async def test_a_500_another_backend_serves_counts_against_the_engine():
    async with serve_upstream([("status", 500)]) as a, serve_upstream(["ok"]) as b:
        cfg = two(a, b, breaker={"min_requests": 1, "cooldown_s": 60})
        async with open_router(cfg) as (rt, client):
            r = await client.post(CHAT, json=chat())
            ready = await client.get("/ready")
    assert r.status_code == 200 and r.headers["x-llmroute-backend"] == "b"
    assert ready.json()["usable_backends"] == ["b"]


@pytest.mark.parametrize("step", [("cut", 2), "malformed", "inband", ("stall", 3)],
                         ids=["cut", "malformed", "inband", "stall"])
async def test_failure_after_first_byte_ends_with_error_event(step):
    async with serve_upstream([step]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          timeouts={"stall_s": 0.5})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat(stream=True))
    assert r.status_code == 200
    data = sse_data(r.text)
    assert "[DONE]" not in data
    last = json.loads(data[-1])
    assert set(last["error"]) == {"message", "type", "param", "code"}
    assert json.loads(data[0])["choices"][0]["delta"]["content"] == "Hello"


async def test_non_streamed_answer_past_the_total_timeout_fails_over_or_is_a_504():
    async with serve_upstream([("hang", 5)]) as slow, serve_upstream(["ok"]) as fast:
        cfg = two(slow, fast, timeouts={"total_s": 0.3})
        async with open_router(cfg) as (_, client):
            rs = [await client.post(CHAT, json=chat()) for _ in range(2)]
        alone = make_config([{"id": "a", "pool": "general", "base_url": slow.base_url}],
                            timeouts={"total_s": 0.3})
        async with open_router(alone) as (_, client):
            lone = await asyncio.wait_for(client.post(CHAT, json=chat()), 3.0)
    assert all(r.status_code == 200 for r in rs)
    assert {r.headers["x-llmroute-backend"] for r in rs} == {"b"}
    err = lone.json()["error"]  # every attempt timed out: a gateway timeout (issue 19)
    assert lone.status_code == 504 and err["code"] == "upstream_timeout"
    assert set(err) == {"message", "type", "param", "code"}
    assert "the engine gave no answer within 0.3 s" in err["message"]
