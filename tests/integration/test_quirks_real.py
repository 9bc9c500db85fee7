"""Engine quirks against a real ``llama-server`` (SmolLM2-135M, launched by llmroute).

Captured from the engine itself (the ``llama-cpp-python`` 0.3.36 build): given both
``max_tokens`` and ``max_completion_tokens`` it obeys ``max_completion_tokens`` even when it
is the larger (``max_tokens: 2, max_completion_tokens: 12`` → 12 tokens), so the router
sends the smaller of the two in ``max_tokens`` alone; a ``developer`` message goes as
``system``; ``n`` > 1 is not routed to it (not in its kind's capabilities).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from fakes.real import real_router

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """\
pools:
  general: {}
backends:
  - id: llama
    pool: general
    engine: llamacpp
    launch: {ctx_size: 1024, slots: 1, threads: 1}
routing: {default_pool: general}
gate: {kind: rules}
"""
COUNT = [{"role": "user", "content": "Count from one to twenty in words."}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with real_router(CONFIG, "test_quirks_real") as (_, url), \
            httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield client


async def test_the_smaller_budget_wins_whichever_field_holds_it(http: httpx.AsyncClient):
    for max_tokens, max_completion in ((2, 12), (12, 2)):
        r = await http.post("/v1/chat/completions", json={
            "model": "general", "messages": COUNT, "temperature": 0,
            "max_tokens": max_tokens, "max_completion_tokens": max_completion})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] <= 2


async def test_a_developer_message_is_answered(http: httpx.AsyncClient):
    r = await http.post("/v1/chat/completions", json={
        "model": "general", "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "developer", "content": "Answer briefly."}, *COUNT]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


async def test_n_two_is_a_400_naming_n(http: httpx.AsyncClient):
    r = await http.post("/v1/chat/completions", json={
        "model": "general", "messages": COUNT, "max_tokens": 2, "n": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
