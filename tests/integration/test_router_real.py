"""The real router over real local engines: three ``llama-server`` processes (SmolLM2-135M)
behind ``create_app`` served by uvicorn on loopback, driven by the unmodified ``openai`` SDK
and plain HTTP.

The engines start once for the module. The test that kills an engine runs last (pytest keeps
file order). Skipped when the engine binary or the model is missing — except in CI (``CI``
set), where such a failure fails them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio
from fakes.real import real_router

from llmroute.flow import pipeline
from llmroute.flow.call import Call
from llmroute.api.wire import parse_chat
from llmroute.runtime import Runtime

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SERVED = "smollm2-135m-instruct"
GENERAL = {"general-1", "general-2"}
CONFIG = """\
pools:
  general: {description: everyday chat}
  long-context: {description: long documents}
backends:
  - id: general-1
    pool: general
    engine: llamacpp
    launch: {ctx_size: 2048, slots: 2, threads: 1}
  - id: general-2
    pool: general
    engine: llamacpp
    launch: {ctx_size: 2048, slots: 1, threads: 1}
  - id: long-1
    pool: long-context
    engine: llamacpp
    launch: {ctx_size: 4096, slots: 1, threads: 1}
routing:
  default_pool: general
  intents: {summarization: long-context, extraction: long-context}
"""
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
SUMMARY = [{"role": "user", "content": (
    "Summarize the following text in one sentence: The city council met on Tuesday to discuss "
    "the new park. Residents asked for more trees and benches, and the council agreed to plant "
    "fifty trees next spring.")}]
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


@dataclass
class Router:
    rt: Runtime
    url: str
    sdk: openai.AsyncOpenAI
    http: httpx.AsyncClient


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def router() -> AsyncIterator[Router]:
    async with contextlib.AsyncExitStack() as stack:
        rt, url = await stack.enter_async_context(real_router(CONFIG, "test_router_real"))
        # max_retries=0: every failover seen here is the router's, not the SDK's.
        sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)
        stack.push_async_callback(sdk.close)
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60))
        yield Router(rt, url, sdk, http)


async def _slots(router: Router, backend_id: str) -> list[dict[str, Any]]:
    """The engine's own ``GET /slots`` (bypassing the router)."""
    resp = await router.http.get(router.rt.backends[backend_id].base_url + "/slots")
    resp.raise_for_status()
    slots: list[dict[str, Any]] = resp.json()
    return slots


def _in_flight(router: Router, backend_id: str) -> int:
    return router.rt.stats.snapshot(router.rt.clock()).stats[backend_id].in_flight


def _error_fields(body: dict[str, Any]) -> dict[str, Any]:
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    return error


# --- 1. non-streamed chat, headers, models -----------------------------------------------

async def test_chat_through_the_sdk_returns_engine_text_and_route_headers(router: Router
                                                                           ) -> None:
    raw = await router.sdk.chat.completions.with_raw_response.create(
        model="auto", messages=QUESTION, max_tokens=16, temperature=0,
        extra_headers={"x-request-id": "it-chat-1"})
    completion = raw.parse()

    assert raw.status_code == 200
    assert raw.headers["x-request-id"] == "it-chat-1"
    assert raw.headers["x-llmroute-intent"] == "open_qa"
    assert raw.headers["x-llmroute-pool"] == "general"
    assert raw.headers["x-llmroute-backend"] in GENERAL
    assert completion.object == "chat.completion"
    assert completion.model == SERVED
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert 1 <= completion.usage.completion_tokens <= 16
    assert completion.usage.total_tokens == (completion.usage.prompt_tokens
                                             + completion.usage.completion_tokens)


@pytest.mark.parametrize(("model", "messages", "intent", "pool", "backends"), [
    ("auto", SUMMARY, "summarization", "long-context", {"long-1"}),
    ("long-context", QUESTION, "open_qa", "long-context", {"long-1"}),
    ("general", SUMMARY, "summarization", "general", GENERAL),
], ids=["auto-summary-to-long", "pool-name-long", "pool-name-general"])
async def test_model_and_intent_choose_the_pool(router: Router, model: str,
                                                messages: list[dict[str, str]], intent: str,
                                                pool: str, backends: set[str]) -> None:
    raw = await router.sdk.chat.completions.with_raw_response.create(
        model=model, messages=messages, max_tokens=8, temperature=0)
    completion = raw.parse()
    assert (raw.headers["x-llmroute-intent"], raw.headers["x-llmroute-pool"]) == (intent, pool)
    assert raw.headers["x-llmroute-backend"] in backends
    assert completion.choices[0].message.content


async def test_models_lists_auto_pools_and_served_model(router: Router) -> None:
    ids = [m.id async for m in router.sdk.models.list()]
    assert ids == ["auto", "general", "long-context", SERVED]


# --- 2. streamed chat ----------------------------------------------------------------------

async def test_streamed_chat_through_the_sdk_with_usage_chunk(router: Router) -> None:
    async with router.sdk.chat.completions.with_streaming_response.create(
            model="auto", messages=QUESTION, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-llmroute-backend"] in GENERAL
        chunks = [chunk async for chunk in await resp.parse()]

    assert len(chunks) >= 3
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    finishes = [c.choices[0].finish_reason for c in chunks
                if c.choices and c.choices[0].finish_reason]
    assert finishes in (["stop"], ["length"])
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert usage_chunks and usage_chunks[-1] is chunks[-1]
    assert chunks[-1].choices == []
    assert 1 <= chunks[-1].usage.completion_tokens <= 16  # type: ignore[union-attr]


# --- 3. legacy completions -----------------------------------------------------------------

async def test_completions_through_the_sdk(router: Router) -> None:
    raw = await router.sdk.completions.with_raw_response.create(
        model="auto", prompt="Once upon a time", max_tokens=12, temperature=0)
    completion = raw.parse()
    assert raw.headers["x-llmroute-pool"] == "general"
    assert completion.object == "text_completion"
    assert completion.choices[0].text.strip()
    assert completion.usage is not None and 1 <= completion.usage.completion_tokens <= 12

    stream = await router.sdk.completions.create(
        model="auto", prompt="Once upon a time", max_tokens=8, temperature=0, stream=True)
    streamed = "".join([c.choices[0].text async for c in stream if c.choices])
    assert streamed.strip()


# --- 4. tool calls -------------------------------------------------------------------------

async def test_tool_request_is_classified_and_answered(router: Router) -> None:
    raw = await router.sdk.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL], tool_choice="auto", max_tokens=24, temperature=0)
    completion = raw.parse()
    assert raw.headers["x-llmroute-intent"] == "tool_call"
    assert raw.headers["x-llmroute-pool"] == "general"
    choice = completion.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    if choice.message.tool_calls:  # the 135M model may or may not call the tool
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather"
        assert isinstance(json.loads(call.function.arguments), dict)
    else:
        assert choice.message.content and choice.message.content.strip()


async def test_tool_fields_reach_the_engine(router: Router) -> None:
    """An invalid ``tool_choice`` is not the router's business: llama.cpp rejects it, and its
    400 comes back to the client unchanged — proof that the tool fields were forwarded."""
    with pytest.raises(openai.BadRequestError) as info:
        await router.sdk.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER_TOOL], tool_choice="bogus", max_tokens=8)  # type: ignore[arg-type]
    assert info.value.status_code == 400
    assert "tool_choice" in info.value.message
    assert all(router.rt.breaker.allow(b, router.rt.clock()) for b in router.rt.backends)


# --- 5. logprobs ---------------------------------------------------------------------------

def _check_logprobs(entries: list[Any]) -> None:
    assert entries
    for entry in entries:
        assert entry.logprob <= 0.0
        assert len(entry.top_logprobs) == 3
        tops = [t.logprob for t in entry.top_logprobs]
        assert tops == sorted(tops, reverse=True)


async def test_logprobs_pass_through_non_streamed(router: Router) -> None:
    completion = await router.sdk.chat.completions.create(
        model="auto", messages=QUESTION, max_tokens=8, temperature=0,
        logprobs=True, top_logprobs=3)
    choice = completion.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    _check_logprobs(choice.logprobs.content)
    assert completion.usage is not None
    assert len(choice.logprobs.content) == completion.usage.completion_tokens


async def test_logprobs_pass_through_streamed(router: Router) -> None:
    stream = await router.sdk.chat.completions.create(
        model="auto", messages=QUESTION, max_tokens=8, temperature=0, stream=True,
        logprobs=True, top_logprobs=3)
    entries = [entry async for chunk in stream if chunk.choices
               and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content
               for entry in chunk.choices[0].logprobs.content]
    _check_logprobs(entries)


# --- 8. bad input over real HTTP ----------------------------------------------------------

@pytest.mark.parametrize(("content", "content_type", "status", "code", "param"), [
    (b'{"model": "auto", "messages": [', "application/json", 400, "invalid_json", None),
    (json.dumps({"model": "auto", "messages": QUESTION}).encode(), "text/plain", 415,
     "unsupported_media_type", "content-type"),
    (json.dumps({"model": "gpt-9", "messages": QUESTION}).encode(), "application/json", 404,
     "model_not_found", "model"),
], ids=["malformed-json", "text-plain", "unknown-model"])
async def test_bad_input_gets_an_openai_error(router: Router, content: bytes,
                                              content_type: str, status: int, code: str,
                                              param: str | None) -> None:
    resp = await router.http.post("/v1/chat/completions", content=content,
                                  headers={"content-type": content_type})
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    error = _error_fields(resp.json())
    assert (error["code"], error["param"]) == (code, param)
    assert error["type"] in ("invalid_request_error", "not_found_error")


async def test_unknown_model_raises_not_found_in_the_sdk(router: Router) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await router.sdk.chat.completions.create(model="gpt-9", messages=QUESTION,
                                                 max_tokens=4)
    assert info.value.code == "model_not_found"


# --- 6. client disconnect stops the engine -------------------------------------------------

async def test_client_disconnect_stops_generation_on_the_engine(router: Router) -> None:
    story = [{"role": "user", "content": "Write a very long story about a dragon who learns "
                                         "to bake bread. Make it as long as you can."}]
    async with router.sdk.chat.completions.with_streaming_response.create(
            model="auto", messages=story, max_tokens=2000, temperature=1, stream=True,
            extra_body={"ignore_eos": True}) as resp:  # ~2000 tokens: a minute or more
        backend_id = resp.headers["x-llmroute-backend"]
        stream = await resp.parse()
        tokens = 0
        async for chunk in stream:
            tokens += bool(chunk.choices and chunk.choices[0].delta.content)
            if tokens >= 3:
                break
        busy = [s["id"] for s in await _slots(router, backend_id) if s["is_processing"]]
        assert len(busy) == 1, "the engine must be generating while the client reads"
        assert _in_flight(router, backend_id) == 1
        await stream.close()
    closed = time.monotonic()

    idle = False
    while time.monotonic() - closed < 5.0:
        slots = await _slots(router, backend_id)
        idle = not any(s["is_processing"] for s in slots) and _in_flight(router, backend_id) == 0
        if idle:
            break
        await asyncio.sleep(0.1)
    assert idle, (f"{backend_id} still generating {time.monotonic() - closed:.1f} s after the "
                  f"client left: slots={[s['is_processing'] for s in slots]}, "
                  f"in_flight={_in_flight(router, backend_id)}")


# --- 7. a dead engine: failover inside the pool (LAST: it kills an engine) -----------------

async def test_killed_engine_fails_over_to_the_rest_of_the_pool(router: Router) -> None:
    rt = router.rt
    body = {"model": "auto", "messages": QUESTION, "max_tokens": 8, "temperature": 0}
    victim = (await pipeline.decide(Call(rt, parse_chat(body, "probe")))).candidates[0].backend.id
    assert victim in GENERAL
    assert rt.fleet is not None
    engine = rt.fleet.engines[victim]
    assert engine.pid is not None
    os.kill(engine.pid, signal.SIGKILL)
    for _ in range(100):
        if engine.returncode is not None:
            break
        await asyncio.sleep(0.05)
    assert engine.returncode == -signal.SIGKILL

    served = []
    for _ in range(4):
        raw = await router.sdk.chat.completions.with_raw_response.create(**body)
        assert raw.parse().choices[0].message.content
        served.append((raw.headers["x-llmroute-backend"], raw.headers["x-llmroute-pool"]))
    async with router.sdk.chat.completions.with_streaming_response.create(
            **body, stream=True) as resp:
        text = "".join([c.choices[0].delta.content or "" async for c in await resp.parse()
                        if c.choices])
        served.append((resp.headers["x-llmroute-backend"], resp.headers["x-llmroute-pool"]))
    assert text.strip()

    (survivor,) = GENERAL - {victim}
    assert served == [(survivor, "general")] * 5
    stats = rt.stats.snapshot(rt.clock()).stats[victim]
    # Either a request tried the dead engine and failed over, or the collector's poll saw it
    # down first and the anchor ranked it last (a dark backend): both are failover in the pool.
    dark = rt.signals is not None and victim in rt.signals.dark(rt.clock())
    assert (stats.error_rate or 0) > 0 or dark, "the victim was neither tried nor seen down"
    assert stats.in_flight == 0
