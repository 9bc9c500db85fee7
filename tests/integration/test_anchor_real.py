"""``/debug/backends`` on a real local ``llama-server``: the collector polls its ``/metrics``
and ``/slots``, and the signals update while a request runs and after it ends.

One small engine (SmolLM2-135M, two slots) for the module. Skipped when the engine binary or
the model is missing — except in CI (``CI`` set), where that fails.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fakes.real import real_router

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """\
anchor: {poll_interval_s: 0.1, stale_after_s: 2.0}
pools: {general: {}}
backends:
  - {id: local-1, pool: general, engine: llamacpp, launch: {ctx_size: 1024, slots: 2, threads: 1}}
routing: {default_pool: general}
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with contextlib.AsyncExitStack() as stack:
        rt, url = await stack.enter_async_context(real_router(CONFIG, "test_anchor_real"))
        yield await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60))


async def _row(http: httpx.AsyncClient) -> dict[str, Any]:
    body = (await http.get("/debug/backends")).json()
    return body["backends"][0]


async def _until(http: httpx.AsyncClient, ok, timeout_s: float = 20.0) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        row = await _row(http)
        if ok(row) or loop.time() > deadline:
            return row
        await asyncio.sleep(0.05)


def _value(row: dict[str, Any], name: str) -> Any:
    return row["signals"].get(name, {}).get("value")


async def test_real_llamacpp_signals_are_fresh_and_update(http: httpx.AsyncClient) -> None:
    idle = await _until(http, lambda r: r["collector"]["state"] == "up")
    assert idle["collector"]["source"] == "llamacpp"
    assert _value(idle, "total_slots") == 2 and _value(idle, "idle_slots") == 2
    assert _value(idle, "running") == 0 and _value(idle, "waiting") == 0
    assert idle["signals"]["running"]["age_s"] < 2.0 and not idle["signals"]["running"]["stale"]
    assert idle["scores"]["kv-cache"] == 1.0 and idle["logprobs"] is True
    before = _value(idle, "prompt_tokens_total")

    body = {"model": "auto", "max_tokens": 48, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "Count from one to thirty in words."}]}
    async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        lines = aiter(resp.aiter_lines())
        await anext(lines)
        busy = await _until(http, lambda r: _value(r, "running") == 1, timeout_s=10)
        assert _value(busy, "idle_slots") == 1
        assert busy["scores"]["kv-cache"] == 0.5
        async for _ in lines:
            pass

    done = await _until(http, lambda r: (_value(r, "prompt_tokens_total") or 0) > before
                        and _value(r, "running") == 0)
    assert _value(done, "prompt_tokens_total") > before
    assert _value(done, "idle_slots") == 2
    assert done["router"]["window_requests"] == 1 and done["router"]["ttft_p95_ms"] > 0
