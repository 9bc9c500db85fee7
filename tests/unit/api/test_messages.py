"""``POST /v1/messages`` through the real ``anthropic`` SDK against the router on scripted
upstreams (loopback): a message and its usage, the SDK's own stream helper, a tool-use round
trip, ``count_tokens`` through the engine's tokenizer, a fuse handoff invisible in
Anthropic's events, and every malformed body answered in Anthropic's error shape."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
import pytest
from fakes.router import httpx2_client, make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.api.server import serve_in_background

HEAD = {"object": "chat.completion.chunk", "created": 1700000000, "model": "served"}


def one(*ups: Any, **extra: Any) -> Any:
    return make_config([{"id": f"b{i}", "pool": "general", "base_url": up.base_url}
                        for i, up in enumerate(ups)], **extra)


def sdk(client: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="x", base_url="http://router",
                                    http_client=httpx2_client(client), max_retries=0)


def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-real", **HEAD,
            "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


async def test_a_message_is_answered_with_its_usage_and_translated_upstream():
    async with serve_upstream(["ok"]) as up, open_router(one(up)) as (_, client):
        msg = await sdk(client).messages.create(
            model="auto", max_tokens=64, system="Be brief.", stop_sequences=["END"],
            extra_body={"temperature": 0.2}, metadata={"user_id": "u-1"},
            messages=[{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}])
    assert msg.type == "message" and msg.role == "assistant"
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == "Hello from the fake engine."
    assert msg.stop_reason == "end_turn"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (5, 5)
    sent = up.requests[0]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Hi there"}]
    assert (sent["max_tokens"], sent["stop"], sent["temperature"], sent["user"]) == (
        64, ["END"], 0.2, "u-1")


async def test_the_sdk_stream_helper_assembles_the_streamed_message():
    async with serve_upstream(["ok"], "One two three four") as up, \
            open_router(one(up)) as (_, client):
        async with sdk(client).messages.stream(
                model="auto", max_tokens=64,
                messages=[{"role": "user", "content": "Count"}]) as stream:
            pieces = [t async for t in stream.text_stream]
            final = await stream.get_final_message()
    assert "".join(pieces) == "One two three four" and len(pieces) == 4
    assert final.content[0].text == "One two three four"
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (5, 4)
    assert up.requests[0]["stream_options"] == {"include_usage": True}


async def test_the_raw_events_come_in_anthropics_order_with_a_ping():
    async with serve_upstream(["ok"], "Hi you") as up, open_router(one(up)) as (_, client):
        r = await client.post("/v1/messages", headers={"anthropic-version": "2023-06-01"},
                              json={"model": "auto", "max_tokens": 9, "stream": True,
                                    "messages": [{"role": "user", "content": "Hi"}]})
    names = [line[7:] for line in r.text.split("\n") if line.startswith("event: ")]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta",
                     "content_block_delta", "content_block_stop", "message_delta",
                     "message_stop"]
    assert r.headers["content-type"].startswith("text/event-stream")


TOOL_STREAM = [
    delta({"role": "assistant", "content": "Let me look."}),
    delta({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                           "function": {"name": "get_weather", "arguments": ""}}]}),
    delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    delta({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    delta({}, "tool_calls"),
]
TOOLS = [{"name": "get_weather", "description": "Weather by city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


async def test_a_tool_use_round_trip_streams_the_call_and_sends_the_result_back():
    async with serve_upstream([("raw", TOOL_STREAM), "ok"]) as up, \
            open_router(one(up)) as (_, client):
        ask = [{"role": "user", "content": "Weather in Paris?"}]
        async with sdk(client).messages.stream(model="auto", max_tokens=64, tools=TOOLS,
                                               tool_choice={"type": "any"},
                                               messages=ask) as stream:
            first = await stream.get_final_message()
        call = first.content[1]
        assert [b.type for b in first.content] == ["text", "tool_use"]
        assert (call.id, call.name, call.input) == ("call_a", "get_weather", {"city": "Paris"})
        assert first.stop_reason == "tool_use"
        second = await sdk(client).messages.create(
            model="auto", max_tokens=64, tools=TOOLS, messages=[
                *ask, {"role": "assistant", "content": first.content},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_a", "content": "18 °C"},
                    {"type": "text", "text": "So?"}]}])
    assert up.requests[0]["tool_choice"] == "required"
    assert up.requests[0]["tools"][0]["function"]["parameters"] == TOOLS[0]["input_schema"]
    sent = up.requests[1]["messages"]
    assert sent[1] == {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "call_a", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}
    assert sent[2:] == [{"role": "tool", "tool_call_id": "call_a", "content": "18 °C"},
                        {"role": "user", "content": "So?"}]
    assert second.content[0].type == "tool_use"  # the fake answers a call when given tools


async def test_count_tokens_asks_the_engines_tokenizer():
    async with serve_upstream(["ok"]) as up, open_router(one(up)) as (_, client):
        up.tokenize = 42
        counted = await sdk(client).messages.count_tokens(
            model="auto", system="Be brief.", messages=[{"role": "user", "content": "Hi"}])
    assert counted.input_tokens == 42
    assert up.tokenized[0]["messages"] == [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"}]
    assert not up.requests  # counting sends nothing to be generated


async def test_a_handoff_mid_stream_loses_and_repeats_no_text():
    async with serve_upstream([("cut", 2)], "The quick brown fox") as a, \
            serve_upstream(["ok"], " jumps over the lazy dog.") as b, \
            open_router(one(a, b)) as (_, client):
        async with sdk(client).messages.stream(
                model="auto", max_tokens=64,
                messages=[{"role": "user", "content": "Go"}]) as stream:
            final = await stream.get_final_message()
    assert final.content[0].text == "The quick jumps over the lazy dog."
    assert len(final.content) == 1 and final.stop_reason == "end_turn"
    assert b.requests[0]["messages"][-1] == {"role": "assistant", "content": "The quick"}


BAD = {
    "no-max-tokens": ({"model": "auto", "messages": [{"role": "user", "content": "x"}]},
                      "max_tokens"),
    "unknown-block": ({"model": "auto", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "document", "source": {}}]}]}, "document"),
    "orphan-result": ({"model": "auto", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x",
                                      "content": "1"}]}]}, "toolu_x"),
    "server-tool": ({"model": "auto", "max_tokens": 5, "tools": [
        {"type": "web_search_20250305", "name": "web_search"}],
        "messages": [{"role": "user", "content": "x"}]}, "server tool"),
    "tool-use-from-user": ({"model": "auto", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                      "input": {}}]}]}, "assistant turn"),
    "bad-role": ({"model": "auto", "max_tokens": 5, "messages": [
        {"role": "system", "content": "x"}]}, "role"),
    "not-an-object": ([1, 2], "JSON object"),
    "zero-max-tokens": ({"model": "auto", "max_tokens": 0, "messages": [
        {"role": "user", "content": "x"}]}, "max_tokens"),
    "named-choice-without-name": ({"model": "auto", "max_tokens": 5, "tool_choice": {
        "type": "tool"}, "messages": [{"role": "user", "content": "x"}]}, "name"),
}


@pytest.mark.parametrize("body,says", BAD.values(), ids=BAD.keys())
async def test_a_malformed_body_gets_anthropics_error_shape(body, says):
    async with serve_upstream(["ok"]) as up, open_router(one(up)) as (_, client):
        r = await client.post("/v1/messages", json=body)
    assert r.status_code == 400
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert says in err["error"]["message"] and err["request_id"] == r.headers["x-request-id"]
    assert not up.requests


async def test_malformed_json_and_a_wrong_media_type_are_anthropic_shaped():
    async with serve_upstream(["ok"]) as up, open_router(one(up)) as (_, client):
        bad_json = await client.post("/v1/messages", content=b"{",
                                     headers={"content-type": "application/json"})
        text = await client.post("/v1/messages", content=b"hi",
                                 headers={"content-type": "text/plain"})
    assert (bad_json.status_code, bad_json.json()["error"]["type"]) == (
        400, "invalid_request_error")
    assert (text.status_code, text.json()["type"]) == (415, "error")


async def test_no_backend_is_anthropics_overloaded_error():
    async with serve_upstream([("status", 503)]) as up, open_router(one(up)) as (_, client):
        with pytest.raises(anthropic.APIStatusError) as caught:
            await sdk(client).messages.create(model="auto", max_tokens=5, messages=[
                {"role": "user", "content": "x"}])
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"


async def test_a_dead_end_mid_stream_is_an_error_event_the_sdk_raises():
    seen: list[str] = []
    async with serve_upstream([("cut", 2)], "The quick brown fox") as up, \
            open_router(one(up)) as (_, client):
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with sdk(client).messages.stream(
                    model="auto", max_tokens=64,
                    messages=[{"role": "user", "content": "Go"}]) as stream:
                async for text in stream.text_stream:
                    seen.append(text)
    assert "".join(seen) == "The quick"
    assert caught.value.body["error"] == {
        "type": "api_error", "message": "the connection closed in the middle of the answer"}


async def test_the_sync_clients_over_real_http():
    """The synchronous ``anthropic`` client (and ``openai``'s ``responses``) over a real
    socket: the app served by uvicorn on loopback, the clients in a worker thread."""
    async with serve_upstream(["ok"], "Hi there") as up, open_router(one(up)) as (_, client):
        async with serve_in_background(client._transport.app) as url:
            def ask() -> tuple[Any, Any]:
                with anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as a, \
                        openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as o:
                    return (a.messages.create(model="auto", max_tokens=8, messages=[
                        {"role": "user", "content": "Hi"}]),
                        o.responses.create(model="auto", input="Hi", store=False))
            msg, resp = await asyncio.to_thread(ask)
    assert msg.content[0].text == "Hi there" == resp.output_text
