"""The answer cache behind the translated surfaces (the router on a scripted upstream,
rules gate: the exact tier): ``/v1/messages`` through the ``anthropic`` SDK and
``/v1/chat/completions`` streamed both get their second identical request from the cache —
the engine is asked once — with zero usage; the cache is off by default; as an answer
stage, a hit frees its priority place and replays the answer the output filter masked; a
key that may not use the plan's pool gets its 403, not another key's entry."""

from __future__ import annotations

import asyncio
import time

import anthropic
from fakes.router import httpx2_client, make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Limits, Tenant


def config(up, **extra):
    return make_config([{"id": "b0", "pool": "general", "base_url": up.base_url}],
                       gate={"kind": "rules"}, **extra)


async def test_messages_are_cached_like_chat():
    async with serve_upstream(["ok"]) as up, \
            open_router(config(up, cache={"enabled": True})) as (rt, client):
        sdk = anthropic.AsyncAnthropic(api_key="x", base_url="http://router",
                                       http_client=httpx2_client(client), max_retries=0)
        ask = [{"role": "user", "content": "Name the largest planet."}]
        first = await sdk.messages.with_raw_response.create(model="auto", max_tokens=64,
                                                            messages=ask)
        again = await sdk.messages.with_raw_response.create(model="auto", max_tokens=64,
                                                            messages=ask)
    assert len(up.requests) == 1
    assert first.headers["x-llmroute-cache"] == "miss"
    assert again.headers["x-llmroute-cache"] == "hit-exact"
    cached, fresh = await again.parse(), await first.parse()
    assert cached.content[0].text == fresh.content[0].text == "Hello from the fake engine."
    assert (cached.usage.input_tokens, cached.usage.output_tokens) == (0, 0)


async def test_a_stream_replays_as_sse_and_the_cache_is_off_by_default():
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    async with serve_upstream(["ok"]) as up, \
            open_router(config(up, cache={"enabled": True})) as (_, client):
        first = await client.post("/v1/chat/completions", json=body)
        again = await client.post("/v1/chat/completions", json=body)
    assert len(up.requests) == 1 and again.headers["x-llmroute-cache"] == "hit-exact"
    events = [line for line in again.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and '"role":"assistant"' in events[0]
    assert "Hello from the fake engine." in again.text and "finish_reason\":\"stop" in again.text
    async with serve_upstream(["ok"]) as up, open_router(config(up)) as (rt, client):
        await client.post("/v1/chat/completions", json=body)
        plain = await client.post("/v1/chat/completions", json=body)
    assert rt.cache is None and len(up.requests) == 2
    assert "x-llmroute-cache" not in plain.headers
    assert first.status_code == 200


async def test_a_hit_frees_its_priority_place_and_replays_the_screened_answer(tmp_path):
    (tmp_path / "words.txt").write_text("forbidden\n", encoding="utf-8")
    screen = {"watch": False, "lists": [{"name": "w", "path": str(tmp_path / "words.txt"),
                                         "action": "mask"}]}
    priority = {"classes": [{"name": "standard", "ttft_target_s": 5}],
                "watermarks": {"in_flight": 4}}
    body = {"model": "auto", "messages": [{"role": "user", "content": "Say the word."}]}
    async with serve_upstream(["ok"], reply="a forbidden word") as up, \
            open_router(config(up, cache={"enabled": True}, priority=priority,
                               content_filter=screen)) as (rt, client):
        first = await client.post("/v1/chat/completions", json=body)
        again = await client.post("/v1/chat/completions", json=body)
        assert rt.priority is not None and rt.priority.active == 0
    assert [type(s).__name__ for s in rt.stages] == ["PrioritySlot", "CachedAnswer",
                                                     "OutputFilter"]
    assert len(up.requests) == 1 and again.headers["x-llmroute-cache"] == "hit-exact"
    assert again.headers["x-llmroute-priority"] == "standard"  # the slot wraps the hit
    masked = first.json()["choices"][0]["message"]["content"]
    assert "forbidden" not in masked and "word" in masked
    assert again.json()["choices"][0]["message"]["content"] == masked
    assert "cache;dur=" in again.headers["server-timing"]


async def test_while_the_fleet_is_saturated_a_hit_takes_no_place_and_a_miss_waits_for_one():
    priority = {"classes": [{"name": "standard", "ttft_target_s": 30}],
                "watermarks": {"in_flight": 1}}
    asked = {"model": "auto", "messages": [{"role": "user", "content": "Name a colour."}]}
    other = {"model": "auto", "messages": [{"role": "user", "content": "Name a fruit."}]}
    async with serve_upstream(["ok", "ok"]) as up, \
            open_router(config(up, cache={"enabled": True}, priority=priority)) as (rt, client):
        assert rt.priority is not None
        await client.post("/v1/chat/completions", json=asked)
        held = rt.priority.enter_now(rt.priority.default)  # the only place, taken
        assert held is not None and rt.priority.enter_now(rt.priority.default) is None
        hit = await asyncio.wait_for(client.post("/v1/chat/completions", json=asked), 5)
        miss = asyncio.create_task(client.post("/v1/chat/completions", json=other))
        await asyncio.sleep(0.3)
        assert not miss.done() and len(up.requests) == 1  # queued for the place
        held.done()
        answered = await asyncio.wait_for(miss, 10)
        assert rt.priority.active == 0
    assert hit.headers["x-llmroute-cache"] == "hit-exact"
    assert hit.headers["x-llmroute-priority"] == "standard"
    assert answered.status_code == 200 and answered.headers["x-llmroute-cache"] == "miss"
    assert len(up.requests) == 2


async def test_a_hit_is_refused_to_a_key_that_may_not_use_the_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMROUTE_TEST_CACHE_ADMIN", "admin-key-for-tests")
    auth = {"enabled": True, "keys_path": str(tmp_path / "keys.db"),
            "admin_key_env": "LLMROUTE_TEST_CACHE_ADMIN"}
    body = {"model": "auto", "messages": [{"role": "user", "content": "Name a colour."}]}
    async with serve_upstream(["ok"]) as up, \
            open_router(config(up, cache={"enabled": True}, auth=auth)) as (rt, client):
        assert rt.policy is not None
        await rt.policy.keys.put_tenant(Tenant("acme", Limits()))
        allowed, _ = await issue_key(rt.policy.keys, "acme", time.time())
        barred, _ = await issue_key(rt.policy.keys, "acme", time.time(), pools=("other",))
        first = await client.post("/v1/chat/completions", json=body,
                                  headers={"authorization": f"Bearer {allowed}"})
        again = await client.post("/v1/chat/completions", json=body,
                                  headers={"authorization": f"Bearer {barred}"})
        rt.policy.keys.close()
    assert first.headers["x-llmroute-cache"] == "miss" and len(up.requests) == 1
    assert (again.status_code, again.json()["error"]["code"]) == (403, "pool_not_allowed")
