"""llama-server refuses ``logprobs`` on a streamed request with ``tools``: the fuse must not
ask for them there (the entropy trigger is off for that request), and must elsewhere."""

from __future__ import annotations

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.mark.parametrize(("engine", "tools", "asks_logprobs"), [
    ("llamacpp", True, False), ("llamacpp", False, True), ("vllm", True, True)],
    ids=["llamacpp-tools", "llamacpp-plain", "vllm-tools"])
async def test_logprobs_requested_only_where_the_engine_accepts_them(engine, tools,
                                                                     asks_logprobs):
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url,
                            "engine": engine}])
        body = {"model": "general", "stream": True,
                "messages": [{"role": "user", "content": "weather in Paris?"}],
                **({"tools": TOOLS} if tools else {})}
        async with open_router(cfg) as (_, client):
            r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert bool(up.requests[0].get("logprobs")) is asks_logprobs
