"""The human, verify, pipeline, cascade and fusion strategy kinds over real local engines
(three ``llama-server`` processes, SmolLM2-135M) behind the router served by uvicorn, driven by
the unmodified ``openai`` SDK: a hand-off answered by an operator and fetched by the client,
a verify with a JSON Schema (the tiny model's JSON may pass or fail: the verdict is what
is checked, not the model's skill), a streamed 3-step pipeline, and a cascade escalating
mid-stream (the general pool's entropy trigger is set to trip at once, so the fuse hands
the stream to the long-context engine), and a fusion voting over the three engines.
Skipped when the engines are missing, except in CI."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest
import pytest_asyncio
from fakes.real import real_router

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """\
pools:
  general: {{description: everyday chat}}
  long-context: {{description: long documents}}
  third: {{description: a third voter}}
backends:
  - id: general-1
    pool: general
    engine: llamacpp
    launch: {{ctx_size: 2048, slots: 2, threads: 1}}
  - id: long-1
    pool: long-context
    engine: llamacpp
    launch: {{ctx_size: 2048, slots: 1, threads: 1}}
  - id: third-1
    pool: third
    engine: llamacpp
    launch: {{ctx_size: 2048, slots: 1, threads: 1}}
routing: {{default_pool: general}}
fuse: {{pools: {{general: {{threshold_nats: 0.001, run_tokens: 1}}}}}}
strategies: {{dir: "{folder}", watch: false, handoffs_path: ":memory:"}}
"""
HUMAN = """\
strategy_id: people
version: 1
when: {keywords: [talk to a human]}
kind: human
message: "Ticket {ticket}: a person will answer."
"""
VERIFY = """\
strategy_id: json-check
version: 2
when: {keywords: [as json]}
kind: verify
pool: general
check: {json_schema: request}
on_failure: regenerate
regenerate_pool: long-context
"""
PIPELINE = """\
strategy_id: three-steps
version: 1
when: {keywords: [in three steps]}
kind: pipeline
steps:
  - {name: topic, pool: general, max_tokens: 16, prompt: "Topic of: {{ request.last_user }}"}
  - {name: facts, pool: general, max_tokens: 32, prompt: "A fact on {{ steps.topic.output }}"}
  - name: answer
    pool: long-context
    prompt: "Using {{ steps.facts.output }}, answer: {{ request.last_user }}"
"""
CASCADE = """\
strategy_id: climb
version: 1
when: {keywords: [think harder]}
kind: cascade
pools: [general, long-context]
"""
FUSION = """\
strategy_id: council
version: 1
when: {keywords: [second opinion]}
kind: fusion
voters: [{pool: general}, {pool: long-context, weight: 1.5}, {pool: third}]
deadline_s: 90
"""
SCHEMA = {"type": "object", "required": ["colour"], "properties": {"colour": {"type": "string"}}}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def router() -> AsyncIterator[tuple[openai.AsyncOpenAI, httpx.AsyncClient]]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "people.yaml").write_text(HUMAN, encoding="utf-8")
        (folder / "json.yaml").write_text(VERIFY, encoding="utf-8")
        (folder / "three.yaml").write_text(PIPELINE, encoding="utf-8")
        (folder / "climb.yaml").write_text(CASCADE, encoding="utf-8")
        (folder / "council.yaml").write_text(FUSION, encoding="utf-8")
        async with contextlib.AsyncExitStack() as stack:
            _, url = await stack.enter_async_context(
                real_router(CONFIG.format(folder=folder), "test_strategies_real"))
            sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0,
                                     timeout=120)
            stack.push_async_callback(sdk.close)
            http = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60))
            yield sdk, http


async def test_a_handoff_is_answered_by_an_operator_and_fetched(router) -> None:
    sdk, http = router
    raw = await sdk.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "I need to talk to a human"}])
    done = raw.parse()
    ticket = raw.headers["x-llmroute-ticket"]
    assert raw.headers["x-llmroute-handoff"] == "human"
    assert raw.headers["x-llmroute-strategy"] == "people@1"
    assert done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.content == f"Ticket {ticket}: a person will answer."
    stream = await sdk.chat.completions.create(
        model="auto", stream=True, messages=[{"role": "user", "content": "talk to a human"}])
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text.startswith("Ticket hof-")
    listed = (await http.get("/admin/handoffs", params={"status": "open"})).json()["data"]
    assert {t["id"] for t in listed} >= {ticket}
    answered = await http.post(f"/admin/handoffs/{ticket}/answer", json={"answer": "Hi!"})
    assert answered.json()["status"] == "answered"
    fetched = (await http.get(f"/v1/handoffs/{ticket}")).json()
    assert fetched["answer"]["choices"][0]["message"]["content"] == "Hi!"


async def test_a_json_schema_verify_gives_a_verdict_on_real_engines(router) -> None:
    sdk, _ = router
    fmt = {"type": "json_schema", "json_schema": {"name": "colour", "schema": SCHEMA}}
    raw = await sdk.chat.completions.with_raw_response.create(
        model="auto", max_tokens=48, response_format=fmt,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Name one colour as JSON."}])
    done = raw.parse()
    flag = raw.headers["x-llmroute-verified"]
    assert raw.headers["x-llmroute-strategy"] == "json-check@2" and flag in ("true", "false")
    note = done.model_extra["llmroute"]["verify"]
    assert note["check"] == "json_schema" and note["verified"] is (flag == "true")
    if flag == "true":
        assert isinstance(json.loads(done.choices[0].message.content or "")["colour"], str)


async def test_a_three_step_pipeline_streams_its_last_step(router) -> None:
    sdk, http = router
    raw = await sdk.chat.completions.with_raw_response.create(
        model="auto", max_tokens=24, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Explain rain in three steps."}])
    chunks = [c async for c in raw.parse()]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert raw.headers["x-llmroute-strategy"] == "three-steps@1" and text
    assert raw.headers["x-llmroute-pool"] == "long-context"
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens > 24  # three steps' tokens
    trace = (await http.get(f"/trace/{raw.headers['x-request-id']}")).json()
    hops = [s for s in trace["steps"] if s["step"] == "pipeline_step"]
    assert [h["step_name"] for h in hops] == ["topic", "facts", "answer"]
    assert hops[1]["input_ref"].endswith("/topic") and hops[0]["output"]


async def test_a_cascade_escalates_mid_stream_through_the_fuse(router) -> None:
    sdk, _ = router
    raw = await sdk.chat.completions.with_raw_response.create(
        model="auto", max_tokens=32, stream=True,
        messages=[{"role": "user", "content": "Think harder: why is the sea salty?"}])
    chunks = [c async for c in raw.parse()]
    assert raw.headers["x-llmroute-strategy"] == "climb@1"
    assert raw.headers["x-llmroute-cascade"] == "general"
    handoffs = chunks[-1].model_extra["llmroute"]["handoffs"]
    assert handoffs and handoffs[0]["from"] == "general-1" and handoffs[0]["to"] == "long-1"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


async def test_a_fusion_votes_over_three_engines(router) -> None:
    sdk, _ = router
    raw = await sdk.chat.completions.with_raw_response.create(
        model="auto", max_tokens=8, temperature=0,
        messages=[{"role": "user", "content": "Second opinion: is the sky blue? Yes or no."}])
    done = raw.parse()
    note = done.model_extra["llmroute"]["fusion"]
    assert raw.headers["x-llmroute-strategy"] == "council@1"
    assert raw.headers["x-llmroute-fusion"] == "general,long-context,third"
    assert [v["status"] for v in note["voters"]] == ["voted"] * 3
    assert all(0 < v["confidence"] <= 1 for v in note["voters"])  # llama.cpp gives logprobs
    assert done.choices[0].logprobs is None and done.choices[0].message.content is not None
    assert done.usage is not None and done.usage.completion_tokens > 8  # three answers
    assert note["winner"]["pool"] in ("general", "long-context", "third")
