"""``/v1/responses`` through the real ``openai`` SDK's ``client.responses`` against the
router on scripted upstreams (loopback): create, the SDK's own stream helper, a follow-up
with ``previous_response_id`` (state kept in the router's SQLite store), a tool-call round
trip, ``GET``/``DELETE``, a fuse handoff invisible in the typed events, and every malformed
body answered with an OpenAI-shaped 4xx."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

HEAD = {"object": "chat.completion.chunk", "created": 1700000000, "model": "served"}


@pytest.fixture
def cfg(tmp_path):
    def build(*ups: Any) -> Any:
        return make_config([{"id": f"b{i}", "pool": "general", "base_url": up.base_url}
                            for i, up in enumerate(ups)],
                           responses={"path": str(tmp_path / "responses.db")})
    return build


def sdk(client: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="x", base_url="http://router/v1", http_client=client,
                              max_retries=0)


def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-real", **HEAD,
            "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


async def test_create_answers_a_response_and_keeps_it(cfg):
    async with serve_upstream(["ok"]) as up, open_router(cfg(up)) as (_, client):
        r = await sdk(client).responses.create(model="auto", input="Hi there",
                                               instructions="Be brief.", max_output_tokens=50)
        again = await sdk(client).responses.retrieve(r.id)
    assert r.status == "completed" and r.output_text == "Hello from the fake engine."
    assert r.id.startswith("resp_") and r.instructions == "Be brief."
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (5, 5, 10)
    assert again.model_dump() == r.model_dump()
    assert up.requests[0]["messages"] == [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi there"}]
    assert up.requests[0]["max_tokens"] == 50


async def test_the_sdk_stream_helper_assembles_the_events(cfg):
    async with serve_upstream(["ok"], "One two three") as up, \
            open_router(cfg(up)) as (_, client):
        async with sdk(client).responses.stream(model="auto", input="Count") as stream:
            kinds = [e.type async for e in stream]
            final = await stream.get_final_response()
    assert final.output_text == "One two three" and final.status == "completed"
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * 3,
                     "response.output_text.done", "response.content_part.done",
                     "response.output_item.done", "response.completed"]
    assert final.usage.output_tokens == 3


async def test_a_follow_up_continues_the_stored_conversation(cfg):
    async with serve_upstream(["ok"], "Paris.") as up, open_router(cfg(up)) as (_, client):
        first = await sdk(client).responses.create(model="auto", instructions="Be brief.",
                                                   input="Capital of France?")
        async with sdk(client).responses.stream(model="auto", input="And of Italy?",
                                                previous_response_id=first.id) as stream:
            second = await stream.get_final_response()
        third = await sdk(client).responses.create(model="auto", input="And Spain?",
                                                   previous_response_id=second.id, store=False)
        with pytest.raises(openai.NotFoundError):
            await sdk(client).responses.retrieve(third.id)
    assert second.previous_response_id == first.id
    assert up.requests[1]["messages"] == [  # instructions are not carried over
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"}]
    assert up.requests[2]["messages"][-3:] == [
        {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And Spain?"}]


TOOL_STREAM = [
    delta({"role": "assistant", "tool_calls": [
        {"index": 0, "id": "call_a", "type": "function",
         "function": {"name": "get_weather", "arguments": ""}}]}),
    delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    delta({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    delta({}, "tool_calls"),
]
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather by city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


async def test_a_tool_call_round_trip(cfg):
    async with serve_upstream([("raw", TOOL_STREAM), ("say", "18 °C in Paris.")]) as up, \
            open_router(cfg(up)) as (_, client):
        async with sdk(client).responses.stream(model="auto", input="Weather in Paris?",
                                                tools=TOOLS, tool_choice="required") as s:
            first = await s.get_final_response()
        call = first.output[0]
        second = await sdk(client).responses.create(
            model="auto", previous_response_id=first.id, tools=TOOLS, input=[
                {"type": "function_call_output", "call_id": call.call_id, "output": "18"}])
    assert (call.type, call.call_id, call.name, call.arguments) == (
        "function_call", "call_a", "get_weather", '{"city": "Paris"}')
    assert up.requests[0]["tool_choice"] == "required"
    assert up.requests[0]["tools"][0] == {"type": "function", "function": {
        "name": "get_weather", "description": "Weather by city",
        "parameters": TOOLS[0]["parameters"]}}
    assert up.requests[1]["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "18"}]
    assert second.output[0].type == "function_call"  # the fake calls when given tools


async def test_items_in_the_input_carry_roles_calls_and_outputs(cfg):
    async with serve_upstream(["ok"]) as up, open_router(cfg(up)) as (_, client):
        await sdk(client).responses.create(model="auto", input=[
            {"role": "developer", "content": "Use metric units."},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather",
             "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "18"}])
    assert up.requests[0]["messages"] == [
        {"role": "developer", "content": "Use metric units."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18"}]


async def test_delete_forgets_and_unknown_ids_are_openai_404s(cfg):
    async with serve_upstream(["ok"]) as up, open_router(cfg(up)) as (_, client):
        r = await sdk(client).responses.create(model="auto", input="Hi")
        await sdk(client).responses.delete(r.id)
        gone = await client.get(f"/v1/responses/{r.id}")
        again = await client.delete(f"/v1/responses/{r.id}")
        follow = await client.post("/v1/responses", json={
            "model": "auto", "input": "x", "previous_response_id": r.id})
    for answer in (gone, again, follow):
        assert answer.status_code == 404 and set(answer.json()["error"]) == {
            "message", "type", "param", "code"}
    assert follow.json()["error"]["param"] == "previous_response_id"
    assert follow.json()["error"]["code"] == "previous_response_not_found"
    assert len(up.requests) == 1


async def test_a_handoff_mid_stream_loses_and_repeats_no_text(cfg):
    async with serve_upstream([("cut", 2)], "The quick brown fox") as a, \
            serve_upstream(["ok"], " jumps over the lazy dog.") as b, \
            open_router(cfg(a, b)) as (_, client):
        async with sdk(client).responses.stream(model="auto", input="Go") as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text == "The quick jumps over the lazy dog."
    assert len(final.output) == 1


CUT_SHORT = [{"id": "chatcmpl-real", "object": "chat.completion", "created": 1700000000,
              "model": "served", "choices": [{"index": 0, "finish_reason": "length",
                                              "message": {"role": "assistant",
                                                          "content": "One two"}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}]
CUT_SHORT_STREAM = [delta({"role": "assistant", "content": "One"}),
                    delta({"content": " two"}, "length")]


async def test_an_answer_cut_by_the_token_budget_is_incomplete_and_so_is_its_item(cfg):
    async with serve_upstream([("raw", CUT_SHORT), ("raw", CUT_SHORT_STREAM)]) as up, \
            open_router(cfg(up)) as (_, client):
        whole = await sdk(client).responses.create(model="auto", input="Count",
                                                   max_output_tokens=2)
        async with sdk(client).responses.stream(model="auto", input="Count",
                                                max_output_tokens=2) as stream:
            events = [e async for e in stream]  # the helper's final needs completed
    kinds, streamed = [e.type for e in events], events[-1].response
    for r in (whole, streamed):
        assert r.status == "incomplete" and r.output_text == "One two"
        assert r.incomplete_details.reason == "max_output_tokens"
        assert [item.status for item in r.output] == ["incomplete"]
    assert kinds[-1] == "response.incomplete"


async def test_a_dead_end_mid_stream_is_response_failed(cfg):
    async with serve_upstream([("cut", 2)], "The quick brown fox") as up, \
            open_router(cfg(up)) as (_, client):
        async with sdk(client).responses.stream(model="auto", input="Go") as stream:
            events = [e async for e in stream]
    assert events[-1].type == "response.failed"
    assert events[-1].response.error.message == "the connection closed in the middle of " \
                                                "the answer"
    assert events[-1].response.output[0].content[0].text == "The quick"


BAD = {
    "hosted-tool": {"model": "auto", "input": "x", "tools": [{"type": "web_search"}]},
    "unknown-item": {"model": "auto", "input": [{"type": "computer_call", "id": "x"}]},
    "orphan-output": {"model": "auto", "input": [
        {"type": "function_call_output", "call_id": "nope", "output": "1"}]},
    "background": {"model": "auto", "input": "x", "background": True},
    "no-input": {"model": "auto"},
    "input-number": {"model": "auto", "input": 3},
    "bad-tool-choice": {"model": "auto", "input": "x", "tool_choice": "sometimes"},
    "bad-part": {"model": "auto", "input": [{"role": "user", "content": [
        {"type": "input_audio", "data": ""}]}]},
    "not-an-object": ["x"],
}


@pytest.mark.parametrize("body", BAD.values(), ids=BAD.keys())
async def test_a_malformed_body_is_an_openai_400(cfg, body):
    async with serve_upstream(["ok"]) as up, open_router(cfg(up)) as (_, client):
        r = await client.post("/v1/responses", json=body)
    assert r.status_code == 400, r.text
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert not up.requests


async def test_previous_response_id_across_two_replicas_on_redis(redis_server):
    async with serve_upstream(["ok"], "Paris.") as up:
        shared = make_config([{"id": "b0", "pool": "general", "base_url": up.base_url}],
                             state={"kind": "redis", "url": redis_server.url,
                                    "prefix": "replicas:"})
        async with open_router(shared) as (_, one), open_router(shared) as (_, two):
            first = await sdk(one).responses.create(model="auto", input="Capital of France?")
            second = await sdk(two).responses.create(model="auto", input="And Italy?",
                                                     previous_response_id=first.id)
            seen = await sdk(one).responses.retrieve(second.id)
    assert up.requests[1]["messages"] == [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And Italy?"}]
    assert seen.previous_response_id == first.id
