"""A quirk learned from the engine's own refusal (``dispatch/adapt.py``): one reshaped retry,
remembered for the backend (the next request goes right the first time), counted and logged
once with the request id; nothing else retried, never two adaptations for one request."""

from __future__ import annotations

from typing import Any

from fakes.engine_rules import ollama_string_content, vllm_alternating_template
from fakes.router import make_config, open_router
from fakes.streams import content, events
from fakes.upstream import serve_upstream
from structlog.testing import capture_logs

CHAT = "/v1/chat/completions"
DEV = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi."}]


def cfg(*ups: Any) -> Any:
    return make_config([{"id": f"b{i}", "pool": "p", "base_url": up.base_url}
                        for i, up in enumerate(ups)])


async def test_a_developer_role_is_learned_after_one_refusal():
    async with serve_upstream(["ok"], rules=(vllm_alternating_template,)) as up:
        async with open_router(cfg(up)) as (rt, client):
            with capture_logs() as logs:
                first = await client.post(CHAT, json={"model": "auto", "messages": DEV})
                second = await client.post(CHAT, json={"model": "auto", "messages": DEV,
                                                       "stream": True})
            metrics = (await client.get("/metrics")).text
            learned = rt.dispatch.client.learned.view()
    assert first.status_code == 200 and content(events(second.text)) == up.reply
    roles = [[m["role"] for m in r["messages"]] for r in up.requests]
    assert roles == [["developer", "user"], ["system", "user"], ["system", "user"]]
    assert learned == {"b0": {"developer_role": False}}
    assert 'llmroute_quirks_learned_total{backend="b0",quirk="developer_role"} 1.0' in metrics
    lines = [e for e in logs if e["event"] == "quirk_learned"]
    assert len(lines) == 1 and lines[0]["request_id"] == first.headers["x-request-id"]


async def test_a_streamed_request_is_adapted_before_its_first_byte():
    async with serve_upstream(["ok"], rules=(vllm_alternating_template,)) as up:
        async with open_router(cfg(up)) as (_, client):
            r = await client.post(CHAT, json={"model": "auto", "messages": DEV, "stream": True})
    assert r.status_code == 200 and content(events(r.text)) == up.reply
    assert len(up.requests) == 2


async def test_any_other_refusal_is_the_client_s_answer_and_not_retried():
    async with serve_upstream([("status", 400)]) as up:
        async with open_router(cfg(up)) as (rt, client):
            r = await client.post(CHAT, json={"model": "auto", "messages": DEV})
            learned = rt.dispatch.client.learned.view()
    assert r.status_code == 400 and len(up.requests) == 1 and learned == {}


async def test_one_adaptation_per_request_the_next_request_learns_the_next():
    """An engine refusing two shapes the body has: the request adapts once (developer), the
    second refusal (text parts) is its answer; the next request adapts the other and is
    served; the one after goes right the first time."""
    parts = [{"role": "developer", "content": "Be brief."},
             {"role": "user", "content": [{"type": "text", "text": "Hi."}]}]
    rules = (vllm_alternating_template, ollama_string_content)
    async with serve_upstream(["ok"], rules=rules) as up:
        async with open_router(cfg(up)) as (rt, client):
            body = {"model": "auto", "messages": parts}
            codes = [(await client.post(CHAT, json=body)).status_code for _ in range(3)]
            learned = rt.dispatch.client.learned.view()
    assert codes == [400, 200, 200]
    assert len(up.requests) == 2 + 2 + 1
    assert learned == {"b0": {"developer_role": False, "string_content": True}}


async def test_the_learned_quirk_stays_with_its_backend():
    async with serve_upstream(["ok"], rules=(vllm_alternating_template,)) as a, \
            serve_upstream(["ok"]) as b:
        two = make_config([{"id": "b0", "pool": "p0", "base_url": a.base_url},
                           {"id": "b1", "pool": "p1", "base_url": b.base_url}])
        async with open_router(two) as (_, client):
            assert (await client.post(CHAT, json={"model": "p0", "messages": DEV})).is_success
            assert (await client.post(CHAT, json={"model": "p1", "messages": DEV})).is_success
    assert [m["role"] for m in b.requests[0]["messages"]] == ["developer", "user"]
