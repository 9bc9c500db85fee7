"""What the client receives is normalised, whatever the engine streamed (scripted upstreams on
loopback, through the app): one id/created/model, chunks without choices only as the usage it
asked for, indexed and merged tool-call deltas (the official SDK's stream helper assembles
them), usage after a handoff that counts what was delivered, legacy completions in their own
shape with their logprobs, and a clear 400 for logprobs no candidate can give."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from fakes.router import make_config, open_router
from fakes.streams import events
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
HEAD = {"object": "chat.completion.chunk", "created": 1700000000, "model": "served"}


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "auto", "stream": True,
            "messages": [{"role": "user", "content": "What is the weather?"}], **extra}


def one(up: Any, engine: str = "vllm") -> Any:
    return make_config([{"id": "b0", "pool": "general", "base_url": up.base_url,
                         "engine": engine}])


def delta(d: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-real", **HEAD,
            "choices": [{"index": 0, "delta": d, "finish_reason": finish}], **extra}


USAGE = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
QUIRKY = [
    {"id": "", "object": "chat.completion.chunk", "created": 0, "model": "", "choices": [],
     "prompt_filter_results": [{"prompt_index": 0}]},
    delta({"role": "assistant", "content": "Hi"}, usage=USAGE),
    delta({"content": " there"}),
    delta({}, "stop"),
    {"id": "chatcmpl-real", **HEAD, "choices": [], "usage": USAGE},
]


@pytest.mark.parametrize("usage", [False, True], ids=["no-usage", "include_usage"])
async def test_metadata_and_usage_reach_the_client_only_as_asked(usage):
    extra = {"stream_options": {"include_usage": True}} if usage else {}
    async with serve_upstream([("raw", QUIRKY)]) as up, \
            open_router(one(up)) as (_, client):
        r = await client.post(CHAT, json=chat(**extra))
    body = [c for c in events(r.text) if isinstance(c, dict)]
    assert {(c["id"], c["created"], c["model"]) for c in body} == {
        ("chatcmpl-real", 1700000000, "served")}
    assert [bool(c["choices"]) for c in body] == [True] * 3 + [False] * usage
    assert ["usage" in c for c in body] == [usage] + [False] * 2 + [True] * usage


CALLS = [
    delta({"role": "assistant", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": ""}},
        {"function": {"arguments": '{"city": '}}]}),
    delta({"tool_calls": [{"function": {"arguments": '"Paris"}'}}]}),
    delta({}, "tool_calls"),
]


async def test_tool_call_deltas_without_index_assemble_in_the_official_sdk():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    async with serve_upstream([("raw", CALLS)]) as up, open_router(one(up)) as (_, client):
        sdk = openai.AsyncOpenAI(api_key="x", base_url="http://router/v1", http_client=client)
        async with sdk.chat.completions.stream(
                model="auto", tools=tools,
                messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
            final = await stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        ("call_a", "get_weather", '{"city": "Paris"}')]


async def test_usage_after_a_handoff_counts_what_the_client_received():
    async with serve_upstream([("cut", 2)], "The quick brown fox") as a, \
            serve_upstream(["ok"], " jumps over the lazy dog.") as b:
        cfg = make_config([{"id": f"b{i}", "pool": "general", "base_url": u.base_url}
                           for i, u in enumerate((a, b))])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat(stream_options={"include_usage": True}))
    body = [c for c in events(r.text) if isinstance(c, dict)]
    # the fallback reports 7 prompt tokens (its prefix included) and 6 completion tokens
    assert body[-1]["usage"] == {"prompt_tokens": 5, "completion_tokens": 2 + 6,
                                 "total_tokens": 13}
    assert {c["model"] for c in body} == {"fake"} and len({c["id"] for c in body}) == 1


async def test_streamed_legacy_completions_keep_their_shape_and_logprobs():
    async with serve_upstream(["ok"], "Once upon") as up, open_router(one(up)) as (_, client):
        r = await client.post("/v1/completions", json={
            "model": "auto", "prompt": "Tell a story:", "stream": True, "logprobs": 2})
    body = [c for c in events(r.text) if isinstance(c, dict)]
    assert {c["object"] for c in body} == {"text_completion"}
    assert "".join(c["choices"][0]["text"] for c in body) == "Once upon"
    lps = [c["choices"][0]["logprobs"] for c in body if c["choices"][0]["text"]]
    assert [lp["tokens"] for lp in lps] == [["Once"], [" upon"]]
    assert all(len(lp["top_logprobs"][0]) == 5 for lp in lps)


async def test_a_chat_shaped_legacy_completion_is_converted():
    async with serve_upstream(["ok"], "Once upon") as up, open_router(one(up)) as (_, client):
        r = await client.post("/v1/completions", json={"model": "auto", "prompt": "Story:"})
    answer = r.json()
    assert answer["object"] == "text_completion"
    assert answer["choices"][0]["text"] == "Once upon" and "message" not in answer["choices"][0]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
async def test_logprobs_no_candidate_can_give_are_a_400(endpoint):
    async with serve_upstream(["ok"]) as up, \
            open_router(one(up, engine="ollama")) as (_, client):
        if endpoint == "chat":
            r = await client.post(CHAT, json=chat(logprobs=True))
        else:
            r = await client.post("/v1/completions", json={
                "model": "auto", "prompt": "x", "logprobs": 1})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "logprobs" and not up.requests
