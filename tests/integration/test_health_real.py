"""A frozen engine (SIGSTOP) on real local ``llama-server``s: once the collector's poll of
it times out it is never ranked first — not while its last signals are still fresh, not
after they go stale, not even while the healthy engine is busy — and ``/ready`` turns 503
only when every engine is frozen.

Two small engines (SmolLM2-135M). Skipped when the engine binary or the model is missing —
except in CI (``CI`` set), where that fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from fakes.real import real_router

from llmroute.runtime import Runtime

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """\
anchor: {poll_interval_s: 0.1, poll_timeout_s: 0.3, stale_after_s: 1.0}
pools: {general: {}}
backends:
  - {id: healthy, pool: general, engine: llamacpp, launch: {ctx_size: 1024, slots: 2, threads: 1}}
  - {id: frozen, pool: general, engine: llamacpp, launch: {ctx_size: 1024, slots: 2, threads: 1}}
routing: {default_pool: general}
"""
BODY = {"model": "auto", "max_tokens": 64, "temperature": 0, "stream": True,
        "messages": [{"role": "user", "content": "Count from one to forty in words."}]}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def router() -> AsyncIterator[tuple[Runtime, httpx.AsyncClient]]:
    async with contextlib.AsyncExitStack() as stack:
        rt, url = await stack.enter_async_context(real_router(CONFIG, "test_health_real"))
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60))
        yield rt, http


@contextlib.contextmanager
def frozen(rt: Runtime, *ids: str):
    """SIGSTOP the engines ``ids`` for the block; SIGCONT them afterwards, whatever happens."""
    assert rt.fleet is not None
    pids = [rt.fleet.engines[i].pid for i in ids]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


async def _until(check, timeout_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _state(http: httpx.AsyncClient, backend: str) -> str:
    return (await http.get("/ready")).json()["backends"][backend]["collector"]


async def test_a_frozen_engine_is_never_ranked_first(router) -> None:
    rt, http = router

    async def both_up() -> bool:
        return {await _state(http, "healthy"), await _state(http, "frozen")} == {"up"}

    await _until(both_up)
    with frozen(rt, "frozen"):
        async def frozen_down() -> bool:
            return await _state(http, "frozen") == "down"

        await _until(frozen_down, timeout_s=5.0)
        firsts, totals = [], {}
        async with http.stream("POST", "/v1/chat/completions", json=BODY) as resp:
            assert resp.status_code == 200 and resp.headers["x-llmroute-backend"] == "healthy"
            lines = aiter(resp.aiter_lines())
            await anext(lines)  # the healthy engine is busy now: in flight, a slot taken
            loop = asyncio.get_running_loop()
            until = loop.time() + 2.0  # crosses stale_after_s (1 s): down, then stale too
            while loop.time() < until:
                route = (await http.get("/debug/route", params={"query": "hi"})).json()
                firsts.append(route["candidates"][0]["backend"])
                totals = {c["backend"]: c["score"] for c in route["candidates"]}
                await asyncio.sleep(0.05)
            async for _ in lines:
                pass
        ready = (await http.get("/ready")).json()
        assert ready["pools"]["general"] == {"ready": True, "serving": ["healthy"]}
        assert set(firsts) == {"healthy"} and len(firsts) > 10
        assert totals["frozen"] < totals["healthy"]
        again = await http.post("/v1/chat/completions", json={**BODY, "stream": False})
        assert again.status_code == 200 and again.headers["x-llmroute-backend"] == "healthy"


async def test_ready_is_503_only_when_every_engine_is_frozen(router) -> None:
    rt, http = router

    async def up() -> bool:
        return (await http.get("/ready")).json()["usable_backends"] == ["healthy", "frozen"]

    await _until(up)
    with frozen(rt, "healthy", "frozen"):
        async def unavailable() -> bool:
            return (await http.get("/ready")).status_code == 503

        await _until(unavailable, timeout_s=5.0)
        body = (await http.get("/ready")).json()
        assert body["pools"]["general"] == {"ready": False, "serving": [],
                                            "reason": "every backend is dark (2 of 2)"}
    await _until(up)  # thawed: the next good polls make it ready again
