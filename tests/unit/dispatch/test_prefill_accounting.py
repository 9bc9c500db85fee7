"""Pending prefill is counted per attempt: on the backend actually tried, until its first
token (streams) or its answer, and released when an attempt fails over."""

from __future__ import annotations

import asyncio

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "word " * 90}]}


def pending(rt, backend_id: str) -> int:
    return rt.stats.snapshot(rt.clock()).stats[backend_id].prefill_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_prompt_is_pending_on_the_backend_tried_until_it_answers(stream):
    async with serve_upstream([("status", 503)]) as a, serve_upstream([("hang", 0.5)]) as b:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": a.base_url},
                           {"id": "b", "pool": "general", "base_url": b.base_url}],
                          retry={"backoff_base_s": 0.0, "backoff_max_s": 0.0})
        async with open_router(cfg) as (rt, client):
            task = asyncio.ensure_future(client.post(CHAT, json={**BODY, "stream": stream}))
            await asyncio.sleep(0.3)
            during = {name: pending(rt, name) for name in ("a", "b")}
            r = await task
            after = {name: pending(rt, name) for name in ("a", "b")}
    assert r.status_code == 200 and r.headers["x-llmroute-backend"] == "b"
    assert len(a.requests) == 1  # tried first, failed over
    assert during["a"] == 0 and during["b"] >= 90
    assert after == {"a": 0, "b": 0}
