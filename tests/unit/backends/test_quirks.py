"""Engine quirks: what each backend is sent, as its scripted upstream on loopback receives it.
Backends are built from config (``make_backends``), so the engine table's rows and a
backend's ``quirks:`` overrides both take part."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import aiohttp
import pytest
from pydantic import ValidationError
from fakes.engine_rules import ollama_null_content, vllm_stream_options
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from hypothesis import given
from hypothesis import strategies as st

from llmroute.assemble.runtime import make_backends
from llmroute.backends.client import BackendClient, upstream_body
from llmroute.backends.engines import Quirks
from llmroute.backends.quirks import resolve, shaper
from llmroute.config import Config, TimeoutConfig

TOOLS = [{"type": "function", "function": {"name": "a", "parameters": {}}},
         {"type": "function", "function": {"name": "b", "parameters": {}}}]


def config(engine: str, quirks: dict[str, Any] | None = None) -> Config:
    backend: dict[str, Any] = {"id": "b0", "pool": "general", "engine": engine,
                               "base_url": "http://127.0.0.1:1", "model": "served"}
    if quirks is not None:
        backend["quirks"] = quirks
    return Config.model_validate({"backends": [backend],
                                  "pools": {"general": {}},
                                  "routing": {"default_pool": "general"}})


async def sent(engine: str, body: dict[str, Any], quirks: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    """The body the engine received for ``body`` sent through the client."""
    async with serve_upstream(["ok"]) as up, aiohttp.ClientSession() as session:
        backend = dataclasses.replace(make_backends(config(engine, quirks), {})["b0"],
                                      base_url=up.base_url)
        await BackendClient(session, TimeoutConfig()).complete(backend, "chat", body, "r")
    return up.requests[0]


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": "hi"}], **extra}


async def test_ollama_reads_the_smaller_budget_in_max_tokens():
    got = await sent("ollama", chat(max_tokens=50, max_completion_tokens=20))
    assert got["max_tokens"] == 20 and "max_completion_tokens" not in got
    assert got["model"] == "served"
    got = await sent("ollama", chat(max_completion_tokens=30))
    assert got["max_tokens"] == 30 and "max_completion_tokens" not in got


async def test_llamacpp_gets_developer_as_system_and_vllm_as_sent():
    body = chat(messages=[{"role": "developer", "content": "be brief"},
                          {"role": "user", "content": "hi"}], max_completion_tokens=9)
    llama = await sent("llamacpp", body)
    assert [m["role"] for m in llama["messages"]] == ["system", "user"]
    assert llama["max_tokens"] == 9
    vllm = await sent("vllm", body)
    assert vllm == {**body, "model": "served"}
    assert body["messages"][0]["role"] == "developer"  # the client's body is untouched


async def test_ollama_named_tool_choice_becomes_required_with_that_tool_only():
    body = chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "b"}})
    got = await sent("ollama", body)
    assert got["tool_choice"] == "required"
    assert [t["function"]["name"] for t in got["tools"]] == ["b"]
    assert (await sent("ollama", chat(tools=TOOLS, tool_choice="auto")))["tools"] == TOOLS


async def test_config_overrides_drop_flatten_stop_stream_options_and_tool_turns():
    quirks = {"drop": ["seed", "n", "parallel_tool_calls"], "string_content": True,
              "list_stop": False, "stream_options": "streamed", "tool_call_content": "empty",
              "developer_role": False}
    body = chat(seed=1, n=1, parallel_tool_calls=False, stop=["x", "y"],
                stream_options={"include_usage": True},
                messages=[{"role": "user", "content": [{"type": "text", "text": "a"},
                                                       {"type": "text", "text": "b"}]},
                          {"role": "assistant", "content": None, "tool_calls": [
                              {"id": "c", "type": "function",
                               "function": {"name": "a", "arguments": "{}"}}]},
                          {"role": "tool", "tool_call_id": "c", "content": "ok"}])
    original = copy.deepcopy(body)
    got = await sent("vllm", body, quirks)
    assert not {"seed", "n", "parallel_tool_calls", "stream_options"} & got.keys()
    assert got["stop"] == "x"
    assert got["messages"][0]["content"] == "ab"
    assert got["messages"][1]["content"] == ""
    assert body == original


async def test_tool_call_content_absent_and_null_forms():
    turn = {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}
    absent = shaper("m", Quirks(tool_call_content="absent"))
    null = shaper("m", Quirks(tool_call_content="null"))
    assert absent is not None and null is not None
    assert "content" not in absent({"messages": [turn]})["messages"][0]
    assert null({"messages": [turn]})["messages"][0]["content"] is None
    texty = {**turn, "content": "calling a"}
    assert null({"messages": [texty]})["messages"][0] == texty


def test_image_parts_are_not_flattened_and_stream_options_stay_on_streams():
    shape = shaper("m", Quirks(string_content=True, stream_options="streamed"))
    assert shape is not None
    parts = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}]
    body = {"stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": parts}]}
    out = shape(body)
    assert out["messages"][0]["content"] == parts and out["stream_options"]


def test_a_kind_without_quirks_has_no_shaper_and_an_unknown_override_is_refused():
    assert shaper("m", resolve("sglang", None)) is None
    assert shaper("m", resolve("emulator", {})) is None
    assert shaper("m", resolve("vllm", {"stream_options": "always"})) is None
    with pytest.raises(ValidationError):
        config("vllm", {"drop_everything": True})
    with pytest.raises(ValidationError, match="cannot drop messages"):
        config("vllm", {"drop": ["seed", "messages"]})


@given(max_tokens=st.none() | st.integers(1, 10_000),
       max_completion=st.none() | st.integers(1, 10_000))
def test_the_budget_sent_is_the_smaller_one(max_tokens: int | None,
                                            max_completion: int | None):
    backend = make_backends(config("ollama"), {})["b0"]
    body = chat()
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if max_completion is not None:
        body["max_completion_tokens"] = max_completion
    out = upstream_body(backend, body)
    given_ = [v for v in (max_tokens, max_completion) if v is not None]
    assert out.get("max_tokens") == (min(given_) if given_ else None)
    assert "max_completion_tokens" not in out


@pytest.mark.parametrize("engine,rule,body", [
    ("vllm", vllm_stream_options, chat(stream_options={"include_usage": True})),
    ("openai", vllm_stream_options, chat(stream_options={"include_usage": True})),
    ("ollama", ollama_null_content, chat(messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], tools=TOOLS)),
], ids=["vllm-stream-options", "openai-stream-options", "ollama-null-tool-turn"])
async def test_each_kind_s_defaults_pass_its_engine_s_own_checks(engine, rule, body):
    """The body a kind's defaults shape passes the check its engine makes (the scripted
    upstream refuses as the real one does: ``fakes/engine_rules.py``) the first time; without
    the kind's quirk (``always`` / ``null``) the engine refuses it, and only the quirk learned
    from that refusal (``dispatch/adapt.py``) saves the request, one round trip later."""
    async with serve_upstream(["ok"], rules=(rule,)) as up:
        cfg = make_config([{"id": "e", "pool": "p", "engine": engine, "base_url": up.base_url}])
        async with open_router(cfg) as (_, client):
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        assert len(up.requests) == 1 and rule(up.requests[0], "/v1/chat/completions") is None
        undo = {"stream_options": "always"} if engine != "ollama" else \
            {"tool_call_content": "null"}
        cfg = make_config([{"id": "e", "pool": "p", "engine": engine, "base_url": up.base_url,
                            "quirks": undo}])
        async with open_router(cfg) as (_, client):
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        assert rule(up.requests[1], "/v1/chat/completions") is not None
        assert rule(up.requests[2], "/v1/chat/completions") is None and len(up.requests) == 3
