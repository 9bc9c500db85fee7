"""The result fuse over two real ``llama-server`` engines (SmolLM2-135M) behind the real app
on loopback: a forced entropy handoff gives one seamless stream, and killing the serving
engine mid-stream still completes the client's answer from the other engine.

Pools: ``forced`` (engine ``e1``, entropy threshold far below any real token, so it always
trips) and ``steady`` (engine ``e2``, the default trigger); each pool's fallback is the
other's engine. Skipped when the engine or model is missing, except in CI.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fakes.real import real_router

from llmroute.runtime import Runtime

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """\
pools:
  forced: {description: trips at once}
  steady: {description: default trigger}
backends:
  - {id: e1, pool: forced, engine: llamacpp, launch: {ctx_size: 2048, slots: 1, threads: 1}}
  - {id: e2, pool: steady, engine: llamacpp, launch: {ctx_size: 2048, slots: 1, threads: 1}}
routing: {default_pool: steady, cross_pool_fallback: true}  # "forced" hands off to "steady"
fuse:
  pools: {forced: {threshold_nats: 0.001, run_tokens: 2}}
"""
QUESTION = [{"role": "user", "content": "Describe the city of Paris in three sentences."}]


@dataclass
class Router:
    rt: Runtime
    http: httpx.AsyncClient


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def router() -> AsyncIterator[Router]:
    async with contextlib.AsyncExitStack() as stack:
        rt, url = await stack.enter_async_context(real_router(CONFIG, "test_fuse_real"))
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=120))
        yield Router(rt, http)


def parse(lines: list[str]) -> list[Any]:
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:])
            for line in lines if line.startswith("data: ")]


def texts(chunks: list[Any]) -> list[str]:
    return [c["choices"][0]["delta"].get("content") or "" for c in chunks
            if isinstance(c, dict) and c.get("choices")]


async def test_forced_entropy_handoff_is_one_seamless_stream(router: Router) -> None:
    body = {"model": "forced", "messages": QUESTION, "max_tokens": 40, "temperature": 0,
            "stream": True}
    r = await router.http.post("/v1/chat/completions", json=body)
    chunks = parse(r.text.split("\n\n"))
    assert chunks[-1] == "[DONE]"
    (handoff,) = chunks[-2]["llmroute"]["handoffs"]
    assert (handoff["from"], handoff["to"], handoff["reason"]) == ("e1", "e2", "entropy")
    assert len({c["id"] for c in chunks[:-1]}) == 1
    assert all("logprobs" not in c["choices"][0] for c in chunks[:-1] if c["choices"])
    parts = texts(chunks[:-1])
    prefix = "".join(parts[1:1 + handoff["at_token"]])  # parts[0]: the role chunk
    rest = "".join(parts[1 + handoff["at_token"]:])
    assert prefix and rest
    # The fallback alone, asked to continue the same prefix greedily, says exactly `rest`
    # (llama.cpp echoes the prefix first: that echo must not reach the client).
    direct = await router.http.post(router.rt.backends["e2"].base_url + "/v1/chat/completions",
                                    json={"messages": [*QUESTION, {"role": "assistant",
                                                                   "content": prefix}],
                                          "max_tokens": 40 - handoff["at_token"],
                                          "temperature": 0})
    assert direct.json()["choices"][0]["message"]["content"] == prefix + rest
    debug = (await router.http.get("/debug/fuse")).json()
    assert debug["recent"][0]["reason"] == "entropy" and debug["recent"][0]["window"]
    assert debug["backends"]["e1"]["entropy_trigger"] is True


async def test_killing_the_serving_engine_mid_stream_loses_no_client_stream(
        router: Router) -> None:
    """LAST: kills e2 while it streams; e1 finishes the answer."""
    body = {"model": "steady", "messages": QUESTION, "max_tokens": 96, "temperature": 0,
            "stream": True}
    engine = router.rt.fleet.engines["e2"] if router.rt.fleet else None
    assert engine is not None and engine.pid is not None
    lines: list[str] = []
    async with router.http.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.headers["x-llmroute-backend"] == "e2"
        async for line in resp.aiter_lines():
            lines.append(line)
            if len(lines) == 12:  # a few tokens in: kill the engine serving the stream
                os.kill(engine.pid, signal.SIGKILL)
    chunks = parse(lines)
    assert chunks[-1] == "[DONE]", chunks[-1]
    (handoff,) = chunks[-2]["llmroute"]["handoffs"]
    assert (handoff["from"], handoff["to"], handoff["reason"]) == ("e2", "e1", "cut")
    assert "".join(texts(chunks[:-1])).strip()
    for _ in range(100):
        if engine.returncode is not None:
            break
        await asyncio.sleep(0.05)
    assert engine.returncode == -signal.SIGKILL
