"""Reliability against real ``llama-server`` engines (SmolLM2-135M, launched by llmroute; two
engines of 1,024 tokens each, greedy decoding): a prompt one token over the context is the
router's own 400 with the engine's real count (chat template included, learned at start);
a stop list on a backend that takes one stop is cut by the router; a ``developer`` message
needs no learning on llama.cpp (it renders the role as ``system`` itself: nothing refused,
nothing learned — the learning after a refusal is tested on the scripted vLLM in
``tests/unit/dispatch/test_adapt.py``); a stream crawling at ~2 tokens/s (its engine
SIGSTOPped all but a sliver of every half second) is handed off to the other engine with
nothing lost or repeated."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fakes.real import real_router

from llmroute.runtime import Runtime

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ENGINE = """\
  - {{id: {id}, pool: general, engine: llamacpp, launch: {{ctx_size: 1024, slots: 1, threads: 1}},
     quirks: {{list_stop: false, developer_role: true}}}}
"""
CONFIG = ("pools: {general: {}}\nbackends:\n" + "".join(ENGINE.format(id=i) for i in "ab")
          + "routing: {default_pool: general}\ngate: {kind: \"off\"}\n"
          "fuse: {enabled: false, slow: {min_tokens_per_s: 5, window_s: 1.5}}\n")
COUNT = [{"role": "user", "content": "Count from one to twenty in words."}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def router() -> AsyncIterator[tuple[Runtime, httpx.AsyncClient]]:
    async with real_router(CONFIG, "test_reliability_real") as (rt, url), \
            httpx.AsyncClient(base_url=url, timeout=120) as client:
        for _ in range(100):  # the templates are learned in the background at start
            if rt.tokens is not None and rt.tokens.templates.done:
                break
            await asyncio.sleep(0.1)
        yield rt, client


async def first_event(client: httpx.AsyncClient, body: dict[str, Any]) -> int:
    """The status of a streamed request, reading only its first event."""
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code == 200:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    break
        else:
            await r.aread()
        return r.status_code


async def test_a_prompt_one_token_over_the_context_is_the_router_s_400(router):
    """"hi" is estimated at 5 tokens; llama-server renders it with SmolLM2's default system
    prompt and the generation prompt into 31. With the output budget one token over the
    1,024-token context the router refuses it, naming that count; one token less is served."""
    rt, client = router
    assert rt.tokens is not None and rt.tokens.templates.learned == {"a": 26, "b": 26}
    messages = [{"role": "user", "content": "hi"}]
    over = await client.post("/v1/chat/completions", json={
        "model": "general", "messages": messages, "max_tokens": 1024 - 31 + 1})
    assert over.status_code == 400, over.text
    message = over.json()["error"]["message"]
    assert "needs 31 prompt tokens (counted by the engine's tokenizer) plus 994 output " \
        "tokens; the largest context is 1024" in message
    assert await first_event(client, {"model": "general", "messages": messages,
                                      "stream": True, "max_tokens": 1024 - 31}) == 200


async def test_a_stop_list_is_honoured_on_a_backend_that_takes_one_stop(router):
    _, client = router
    base = {"model": "general", "messages": COUNT, "max_tokens": 40, "temperature": 0}
    whole = (await client.post("/v1/chat/completions", json=base)).json()
    text = whole["choices"][0]["message"]["content"]
    words = re.findall(r"\w+", text)
    assert len(words) > 4, text
    stop = words[3]
    expected = text[:text.index(stop)]
    cut = (await client.post("/v1/chat/completions",
                             json={**base, "stop": ["#never#", stop]})).json()
    assert cut["choices"][0]["message"]["content"] == expected
    assert cut["choices"][0]["finish_reason"] == "stop"
    async with client.stream("POST", "/v1/chat/completions", json={
            **base, "stream": True, "stop": ["#never#", stop[:2] + "\u2063", stop]}) as r:
        chunks = [json.loads(line[6:]) async for line in r.aiter_lines()
                  if line.startswith("data: {")]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                       if c.get("choices"))
    assert streamed == expected and chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_a_developer_message_needs_no_learning_on_llama_cpp(router):
    rt, client = router
    r = await client.post("/v1/chat/completions", json={
        "model": "general", "max_tokens": 4, "messages": [
            {"role": "developer", "content": "Answer in one word."},
            {"role": "user", "content": "Capital of France?"}]})
    assert r.status_code == 200, r.text
    assert rt.dispatch.client.learned.view() == {}
    assert "llmroute_quirks_learned_total{" not in (await client.get("/metrics")).text


async def crawl(pid: int, stop: asyncio.Event, run_s: float = 0.012,
                period_s: float = 0.5) -> None:
    """Let the engine run ``run_s`` of every ``period_s`` (SIGSTOP / SIGCONT) until
    ``stop``: about 2 tokens a second from SmolLM2 on one CPU thread."""
    try:
        while not stop.is_set():
            os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(run_s)
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(period_s - run_s)
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_a_stream_crawling_at_two_tokens_a_second_is_handed_off_seamlessly(router):
    rt, client = router
    assert rt.fleet is not None
    body = {"model": "general", "messages": COUNT, "max_tokens": 48, "temperature": 0,
            "stream": True}
    stop, throttle = asyncio.Event(), None
    chunks: list[dict[str, Any]] = []
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            primary = r.headers["x-llmroute-backend"]
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunks.append(json.loads(line[6:]))
                if throttle is None:  # after the first token: the crawl begins
                    pid = rt.fleet.engines[primary].pid
                    throttle = asyncio.create_task(crawl(pid, stop))
    finally:
        stop.set()
        if throttle is not None:
            await throttle
    handoff = chunks[-1]["llmroute"]["handoffs"][0]
    assert (handoff["from"], handoff["reason"]) == (primary, "slow")
    pieces = [c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")]
    prefix, rest = "".join(pieces[:handoff["at_token"]]), "".join(pieces[handoff["at_token"]:])
    fallback = rt.backends[handoff["to"]].base_url
    async with httpx.AsyncClient(base_url=fallback, timeout=60) as engine:
        alone = (await engine.post("/v1/chat/completions", json={
            "messages": [*COUNT, {"role": "assistant", "content": prefix}],
            "max_tokens": 64, "temperature": 0})).json()
    continued = alone["choices"][0]["message"]["content"]
    continued = continued[len(prefix):] if continued.startswith(prefix) else continued
    # the client got the primary's words, then the fallback's own greedy continuation of
    # exactly those (up to the budget left): nothing lost, nothing repeated at the seam
    assert prefix and len(rest) > len(prefix) and continued.startswith(rest)
