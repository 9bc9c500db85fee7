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



@pytest.mark.parametrize(("engine", "tools", "caps", "fuse_on"), [
    ("llamacpp", True, None, True), ("llamacpp", False, None, True),
    ("vllm", True, None, True), ("vllm", False, ["tools"], True), ("ollama", False, None, True),
    ("vllm", False, None, False)],
    ids=["llamacpp-tools", "llamacpp-plain", "vllm-tools", "configured-without-logprobs",
         "ollama", "fuse-off"])
async def test_debug_fuse_reports_the_trigger_the_relay_runs(engine, tools, caps, fuse_on):
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url,
                            "engine": engine, **({"capabilities": caps} if caps else {})}],
                          fuse={"enabled": fuse_on})
        body = {"model": "general", "stream": True,
                "messages": [{"role": "user", "content": "weather in Paris?"}],
                **({"tools": TOOLS} if tools else {})}
        async with open_router(cfg) as (_, client):
            r = await client.post("/v1/chat/completions", json=body)
            report = (await client.get("/debug/fuse")).json()["backends"]["a"]
    assert r.status_code == 200
    said = report["entropy_trigger_with_tools" if tools else "entropy_trigger"]
    assert said is bool(up.requests[0].get("logprobs"))
