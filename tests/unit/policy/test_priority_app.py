"""Priority classes through the app on a scripted slow upstream (loopback): under overload
``batch`` is shed before ``standard``; a bad header is a 400; no classes, no step."""

from __future__ import annotations

import asyncio
import contextlib

from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
CLASSES = [{"name": "realtime", "ttft_target_s": 5}, {"name": "standard", "ttft_target_s": 20},
           {"name": "batch", "ttft_target_s": 60}]


def body() -> dict:
    return {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@contextlib.asynccontextmanager
async def router(script, **priority):
    async with serve_upstream(script) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          gate={"kind": "off"},
                          priority={"classes": CLASSES, "watermarks": {"in_flight": 2},
                                    "max_queue": 4, "tick_s": 0.02, **priority})
        async with open_router(cfg) as (rt, client):
            yield rt, client, up


def post(client, cls):
    return client.post(CHAT, json=body(), headers={"x-llmroute-priority": cls}, timeout=30)


async def test_under_overload_batch_is_shed_before_standard():
    async with router([("hang", 0.3)]) as (rt, client, up):
        first = [asyncio.ensure_future(post(client, "standard")) for _ in range(2)]
        await asyncio.sleep(0.1)  # both in flight: the one backend is at its watermark
        mixed = [asyncio.ensure_future(post(client, c)) for c in ["batch"] * 4 + ["standard"] * 4]
        answers = await asyncio.gather(*first, *mixed)
    classes = ["standard", "standard"] + ["batch"] * 4 + ["standard"] * 4
    shed = [c for c, a in zip(classes, answers) if a.status_code == 503]
    served = [c for c, a in zip(classes, answers) if a.status_code == 200]
    assert shed == ["batch"] * 4
    assert served.count("standard") == 6
    refusal = next(a for a in answers if a.status_code == 503)
    assert refusal.json()["error"]["code"] == "queue_full"
    assert int(refusal.headers["retry-after"]) >= 1
    assert all(a.headers["x-llmroute-priority"] == "standard" for a in answers
               if a.status_code == 200)
    assert len(up.requests) == 6  # shed requests reached no engine
    assert rt.metrics.registry.get_sample_value(
        "llmroute_priority_shed_total", {"class": "batch", "reason": "queue_full"}) == 4
    assert rt.metrics.registry.get_sample_value(
        "llmroute_priority_ttft_total", {"class": "standard", "within": "true"}) == 6


async def test_a_priority_header_naming_no_class_is_an_openai_400():
    async with router(["ok"]) as (_, client, up):
        answer = await post(client, "urgent")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_priority"
    assert up.requests == []


async def test_streams_hold_their_place_until_the_last_chunk():
    async with router(["ok"]) as (rt, client, _):
        answer = await client.post(CHAT, json={**body(), "stream": True})
        assert answer.status_code == 200 and "[DONE]" in answer.text
        assert answer.headers["x-llmroute-priority"] == "standard"
        assert rt.priority is not None and rt.priority.active == 0


async def test_without_classes_there_is_no_priority_step():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          gate={"kind": "off"})
        async with open_router(cfg) as (rt, client):
            answer = await post(client, "anything")
    assert rt.priority is None and answer.status_code == 200
    assert "x-llmroute-priority" not in answer.headers
