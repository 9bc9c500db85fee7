"""The emulator's HTTP API on loopback: OpenAI shapes, logprobs, errors, /metrics."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import pytest_asyncio

from llmroute.anchor.sources.vllm import parse_vllm_metrics
from llmroute.emulator.fleet import Served, serve_engines
from llmroute.emulator.spec import EngineSpec

FAST = EngineSpec("a100-80g", "7b", time_scale=0.01, stream_interval=4, max_waiting=2)
MODEL = FAST.model_name


@pytest_asyncio.fixture
async def engine() -> AsyncIterator[tuple[Served, httpx.AsyncClient]]:
    async with (serve_engines([FAST]) as (served,),
                httpx.AsyncClient(base_url=served.base_url, timeout=30) as client):
        yield served, client


def chat(**kw: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello " * 300}], **kw}


async def sse(client: httpx.AsyncClient, body: dict[str, object]) -> list[dict]:
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        lines = [ln[6:] async for ln in resp.aiter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


async def test_non_streamed_answer_has_max_tokens_and_plausible_logprobs(engine) -> None:
    _, client = engine
    resp = await client.post("/v1/chat/completions",
                             json=chat(max_tokens=7, logprobs=True, top_logprobs=3))
    body = resp.json()
    assert resp.status_code == 200 and body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 7 and body["usage"]["prompt_tokens"] > 300
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    items = choice["logprobs"]["content"]
    assert "".join(t["token"] for t in items) == choice["message"]["content"]
    for t in items:
        tops = t["top_logprobs"]
        assert len(tops) == 3 and t["logprob"] <= 0 and t["token"] in {a["token"] for a in tops}
        assert [a["logprob"] for a in tops] == sorted((a["logprob"] for a in tops), reverse=True)
        assert sum(math.exp(a["logprob"]) for a in tops) <= 1.0 + 1e-9


async def test_stream_chunks_every_interval_then_usage_and_done(engine) -> None:
    _, client = engine
    chunks = await sse(client, chat(stream=True, max_tokens=10,
                                    stream_options={"include_usage": True}))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0]["role"] == "assistant" and deltas[0]["content"]
    assert len(deltas) == 4  # first token, +4, +4, last 1
    text = "".join(d["content"] for d in deltas)
    assert len(text.split()) == 10
    assert chunks[-1]["usage"]["completion_tokens"] == 10
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 3 + ["length"]


async def test_legacy_completions_with_logprobs(engine) -> None:
    _, client = engine
    resp = await client.post("/v1/completions", json={"model": MODEL, "prompt": "def f():",
                                                      "max_tokens": 5, "logprobs": 2})
    choice = resp.json()["choices"][0]
    assert len(choice["logprobs"]["tokens"]) == 5
    assert "".join(choice["logprobs"]["tokens"]) == choice["text"]


ERRORS = [
    ("unknown-model", {"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404,
     "model_not_found"),
    ("too-long", chat(max_tokens=40_000), 400, "context_length_exceeded"),
    ("bad-field", {"model": MODEL, "messages": "x"}, 400, None),
]


@pytest.mark.parametrize("body,status,code", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
async def test_errors_are_openai_shaped(engine, body: dict, status: int, code: str | None) -> None:
    _, client = engine
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status_code == status
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert code is None or err["code"] == code


RAW_BAD = [
    ("chat-not-json", "/v1/chat/completions", b"{", "invalid_json"),
    ("chat-not-an-object", "/v1/chat/completions", b"[]", "invalid_body"),
    ("chat-no-model", "/v1/chat/completions", b'{"messages": []}',
     "missing_required_parameter"),
    ("completions-prompt-a-number", "/v1/completions",
     orjson.dumps({"model": MODEL, "prompt": 5}), "invalid_value"),
]


@pytest.mark.parametrize("path,raw,code", [e[1:] for e in RAW_BAD], ids=[e[0] for e in RAW_BAD])
async def test_bad_bodies_answer_an_openai_shaped_400(engine, path: str, raw: bytes,
                                                       code: str) -> None:
    _, client = engine
    resp = await client.post(path, content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["code"]) == ("invalid_request_error", code) and err["message"]


async def test_full_waiting_queue_answers_503(engine) -> None:
    served, client = engine
    cfg = served.engine.scheduler.config
    # Fill the KV cache so later requests must wait; max_waiting=2 lets two of them queue.
    hog = chat(max_tokens=2000)
    hog["messages"] = [{"role": "user", "content": "x " * int(cfg.max_model_len * 1.4)}]
    tasks = [asyncio.create_task(client.post("/v1/chat/completions", json=hog))
             for _ in range(8)]
    await asyncio.sleep(0.2)
    statuses = [r.status_code for r in await asyncio.gather(*tasks)]
    assert 503 in statuses and 200 in statuses


async def test_metrics_are_read_by_the_vllm_parser(engine) -> None:
    served, client = engine
    await client.post("/v1/chat/completions", json=chat(max_tokens=3))
    signals = parse_vllm_metrics((await client.get("/metrics")).text, taken_at=1.0)
    assert signals.missing == ()
    cfg = served.engine.scheduler.config
    assert signals.kv_capacity_tokens == cfg.total_blocks * cfg.block_size
    assert (signals.running, signals.waiting, signals.kv_cache_usage) == (0, 0, 0.0)
    assert signals.generation_tokens_total == 3 and signals.prompt_tokens_total > 300
    assert signals.ttft_p50_ms is not None and signals.ttft_p50_ms > 0


async def test_metrics_show_load_while_busy(engine) -> None:
    _served, client = engine
    task = asyncio.create_task(client.post("/v1/chat/completions", json=chat(max_tokens=3000)))
    await asyncio.sleep(0.3)
    signals = parse_vllm_metrics((await client.get("/metrics")).text, taken_at=1.0)
    assert signals.running == 1 and signals.kv_cache_usage is not None
    assert signals.kv_cache_usage > 0
    task.cancel()


async def test_client_disconnect_frees_the_kv_cache(engine) -> None:
    served, client = engine
    async with client.stream("POST", "/v1/chat/completions",
                             json=chat(stream=True, max_tokens=5000)) as resp:
        async for _ in resp.aiter_lines():
            break
    for _ in range(100):
        if served.engine.scheduler.idle():
            break
        await asyncio.sleep(0.02)
    assert served.engine.scheduler.idle() and served.engine.scheduler.used_blocks == 0


async def test_health_and_models(engine) -> None:
    served, client = engine
    assert (await client.get("/health")).status_code == 200
    card = (await client.get("/v1/models")).json()["data"][0]
    assert card["id"] == MODEL
    assert card["max_model_len"] == served.engine.scheduler.config.max_model_len
