"""Both translated surfaces against a real ``llmroute serve`` process over a real local
llama.cpp engine (SmolLM2-135M): the unmodified ``anthropic`` SDK (a message, its stream
helper, ``count_tokens`` through llama-server's own tokenizer, a tool-use round trip) and the
``openai`` SDK's ``client.responses`` (create, stream, a follow-up with
``previous_response_id``, a tool-call round trip). Small output budgets: seconds, not
minutes. Skipped when the engine cannot start — except in CI (``CI`` set)."""

from __future__ import annotations

import anthropic
import httpx2
import openai
import pytest
import yaml
from fakes.real import skip_or_fail

from tests.fakes.fleet import Replica
from tests.fakes.redis import free_port

pytestmark = pytest.mark.slow
TOOLS = [{"name": "get_weather", "description": "Get the current weather in a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("surfaces")
    config = folder / "router.yaml"
    config.write_text(yaml.safe_dump({
        "pools": {"general": {}},
        "backends": [{"id": "general-1", "pool": "general", "engine": "llamacpp",
                      "launch": {"ctx_size": 2048, "slots": 2, "threads": 1}}],
        "routing": {"default_pool": "general"}, "gate": {"kind": "off"},
        "responses": {"path": str(folder / "responses.sqlite3")}}))
    replica = Replica(config, free_port())
    try:
        replica.wait_ready(timeout_s=180)
    except RuntimeError as err:
        replica.stop()
        skip_or_fail(f"llmroute serve over a local engine did not start: {err}")
    yield replica.url
    assert replica.stop() == 0


async def test_the_anthropic_sdk_against_a_real_engine(served):
    async with httpx2.AsyncClient(timeout=120) as http:
        sdk = anthropic.AsyncAnthropic(base_url=served, api_key="x", http_client=http,
                                       max_retries=0)
        ask = [{"role": "user", "content": "What is the capital of France?"}]
        msg = await sdk.messages.create(model="auto", max_tokens=16, system="Be brief.",
                                        messages=ask)
        async with sdk.messages.stream(model="auto", max_tokens=16, messages=ask) as stream:
            pieces = [t async for t in stream.text_stream]
            final = await stream.get_final_message()
        counted = await sdk.messages.count_tokens(model="auto", messages=ask)
        answered = await sdk.messages.create(model="auto", max_tokens=16, tools=TOOLS, messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                               "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": "18 degrees and sunny"}]}])
    assert msg.content and msg.content[0].type == "text" and msg.content[0].text
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.usage.input_tokens > 5
    assert "".join(pieces) == final.content[0].text and final.usage.output_tokens >= 1
    assert 5 < counted.input_tokens < 60  # llama-server's own count of the templated prompt
    assert answered.stop_reason in ("end_turn", "max_tokens", "tool_use")


async def test_openai_responses_against_a_real_engine(served):
    async with httpx2.AsyncClient(timeout=120) as http:
        sdk = openai.AsyncOpenAI(base_url=served + "/v1", api_key="x", http_client=http,
                                 max_retries=0)
        first = await sdk.responses.create(model="auto", instructions="Be brief.",
                                           input="What is the capital of France?",
                                           max_output_tokens=16)
        async with sdk.responses.stream(model="auto", input="And of Italy?",
                                        previous_response_id=first.id,
                                        max_output_tokens=16) as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            second = await stream.get_final_response()
        tools = [{"type": "function", "name": "get_weather", "parameters": TOOLS[0][
            "input_schema"]}]
        third = await sdk.responses.create(model="auto", tools=tools, max_output_tokens=16,
                                           input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_1",
             "output": "18 degrees and sunny"}])
        kept = await sdk.responses.retrieve(second.id)
    assert first.output_text and first.status in ("completed", "incomplete")
    assert "".join(deltas) == second.output_text and second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens  # the conversation came along
    assert third.status in ("completed", "incomplete") and third.output
    assert kept.output_text == second.output_text
