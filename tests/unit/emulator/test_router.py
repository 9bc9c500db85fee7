"""The real router (``open_runtime`` + ``create_app`` served by uvicorn) over emulated
engines configured as ``engine: emulator`` backends, driven over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import openai
import pytest_asyncio

from llmroute.api.app import create_app
from llmroute.config import Config
from llmroute.emulator.fleet import serve_engines
from llmroute.emulator.spec import EngineSpec
from llmroute.assemble.runtime import open_runtime
from llmroute.api.server import serve_in_background

SPECS = [EngineSpec("h100", "7b", time_scale=0.01), EngineSpec("l4", "1b", time_scale=0.01)]


@pytest_asyncio.fixture
async def router() -> AsyncIterator[str]:
    async with serve_engines(SPECS) as served:
        backends = [{"id": f"emu-{i}", "pool": "gpu", "engine": "emulator",
                     "base_url": s.base_url, "model": s.spec.model_name,
                     "context_length": s.engine.scheduler.config.max_model_len}
                    for i, s in enumerate(served)]
        config = Config.model_validate({"pools": {"gpu": {}}, "backends": backends,
                                        "routing": {"default_pool": "gpu"},
                                        "gate": {"kind": "rules"}})
        async with (open_runtime(config) as rt,
                    serve_in_background(create_app(config, runtime=rt)) as url):
            yield url


async def test_non_streamed_round_trip(router: str) -> None:
    async with httpx.AsyncClient(base_url=router, timeout=30) as client:
        resp = await client.post("/v1/chat/completions", json={
            "model": "gpu", "max_tokens": 6,
            "messages": [{"role": "user", "content": "Say hi"}]})
    assert resp.status_code == 200
    assert resp.headers["x-llmroute-backend"] in {"emu-0", "emu-1"}
    assert resp.json()["usage"]["completion_tokens"] == 6


async def test_streamed_round_trip_with_logprobs_through_the_sdk(router: str) -> None:
    client = openai.AsyncOpenAI(base_url=router + "/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model="gpu", stream=True, max_tokens=5, logprobs=True, top_logprobs=2,
        messages=[{"role": "user", "content": "Count to five"}])
    tokens = [t async for chunk in stream if chunk.choices and chunk.choices[0].logprobs
              for t in chunk.choices[0].logprobs.content or []]
    assert len(tokens) == 5
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in tokens)
    await client.close()


async def test_both_engines_serve_under_concurrent_load(router: str) -> None:
    body = {"model": "gpu", "max_tokens": 200, "stream": True,
            "messages": [{"role": "user", "content": "x " * 600}]}
    async with httpx.AsyncClient(base_url=router, timeout=60) as client:
        async def one() -> str:
            async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                data = [ln async for ln in resp.aiter_lines() if ln.startswith("data: {")]
                assert json.loads(data[-1][6:])["choices"][0]["finish_reason"] == "length"
                return resp.headers["x-llmroute-backend"]

        used = await asyncio.gather(*(one() for _ in range(12)))
    assert set(used) == {"emu-0", "emu-1"}


async def test_a_repeated_prefix_follows_its_holder_and_debug_backends_shows_the_hits() -> None:
    async with serve_engines(SPECS) as served:
        backends = [{"id": f"emu-{i}", "pool": "gpu", "engine": "emulator",
                     "base_url": s.base_url, "model": s.spec.model_name,
                     "context_length": s.engine.scheduler.config.max_model_len}
                    for i, s in enumerate(served)]
        config = Config.model_validate({
            "pools": {"gpu": {}}, "backends": backends, "routing": {"default_pool": "gpu"},
            "gate": {"kind": "rules"}, "anchor": {"preset": "least-in-flight", "scorers": {
                "in-flight": 0.01, "prefix-affinity": 1.0}}})
        async with (open_runtime(config) as rt,
                    serve_in_background(create_app(config, runtime=rt)) as url,
                    httpx.AsyncClient(base_url=url, timeout=30) as client):
            shared = "".join(f"{i:047d}|" for i in range(64))  # 1,024 tokens
            used = []
            for tail in ("first question", "second question"):
                resp = await client.post("/v1/chat/completions", json={
                    "model": "gpu", "max_tokens": 2,
                    "messages": [{"role": "user", "content": shared + tail}]})
                used.append(resp.headers["x-llmroute-backend"])
            await asyncio.sleep(0.6)  # a poll of each engine's /metrics
            report = (await client.get("/debug/backends")).json()
    assert used[0] == used[1]
    signals = {b["id"]: b["signals"] for b in report["backends"]}[used[0]]
    assert signals["prefix_cache_hits_total"]["value"] >= 1008  # 63 blocks of 16 tokens
    assert signals["prefix_cache_queries_total"]["value"] > signals[
        "prefix_cache_hits_total"]["value"]
