"""The count-tokens step: the estimate on the common path, the engine's tokenizer near a
context limit (scripted ``/tokenize`` on loopback), its time bound, cache, key limit and
``auto_clamp_max_tokens``."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.api.wire import parse_chat, parse_completion
from llmroute.backends.client import BackendClient
from llmroute.backends.engines import engine_kind
from llmroute.config import TimeoutConfig
from llmroute.config.policy import TokensConfig
from llmroute.errors import ContextLengthExceeded
from llmroute.observe.trace import Recorder
from llmroute.policy.counting import TokenCounter, clamp
from llmroute.policy.keys import Limits
from llmroute.policy.tokenizers import EngineTokenizer
from llmroute.types import Backend, ChatRequest

NEAR_1000 = "word " * 540  # 2,700 characters: an estimate of 904 tokens


def chat(text: str, max_tokens: int | None = 50, model: str = "m") -> ChatRequest:
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return parse_chat(body, "r1")


class Scripted:
    """A tokenizer answering ``tokens`` after ``delay_s``, counting its calls."""

    def __init__(self, tokens: int, delay_s: float = 0.0):
        self.tokens, self.delay_s, self.calls = tokens, delay_s, 0

    async def count(self, request: ChatRequest) -> int:
        self.calls += 1
        await asyncio.sleep(self.delay_s)
        return self.tokens


def counter(tok: Scripted | None, limits: tuple[int, ...] = (1000,), **config) -> TokenCounter:
    b = Backend("a", "general", "vllm", "http://x", "m", limits[-1])
    return TokenCounter(TokensConfig(**config), limits, [(b, tok)] if tok else [])


async def test_the_common_path_keeps_the_estimate_and_asks_nothing():
    tok = Scripted(5)
    req = chat("hello there")
    assert await counter(tok).measure(req) is req
    assert tok.calls == 0


@pytest.mark.parametrize("real, expect", [(700, 700), (990, None)], ids=["fits", "too-long"])
async def test_near_a_limit_the_real_count_decides(real, expect):
    tok, trace = Scripted(real), Recorder("r", "r")
    req = chat(NEAR_1000)
    assert req.prompt_tokens == 904
    if expect is None:
        with pytest.raises(ContextLengthExceeded, match="990 prompt tokens .counted"):
            await counter(tok).measure(req, trace=trace)
        return
    out = await counter(tok).measure(req, trace=trace)
    assert (out.prompt_tokens, out.prompt_counted) == (700, True)
    step = trace.steps[-1]
    assert (step.name, step.fields["source"], step.fields["tokens"]) == ("tokens", "tokenizer", 700)


async def test_a_second_identical_prompt_is_counted_from_the_cache():
    tok, trace = Scripted(700), Recorder("r", "r")
    c = counter(tok)
    await c.measure(chat(NEAR_1000))
    out = await c.measure(chat(NEAR_1000), trace=trace)
    assert tok.calls == 1 and out.prompt_tokens == 700
    assert trace.steps[-1].fields["source"] == "cache"
    await c.measure(chat(NEAR_1000 + "x"))
    assert tok.calls == 2


async def test_a_hanging_tokenizer_falls_back_to_the_estimate_within_the_bound():
    tok, trace = Scripted(700, delay_s=30), Recorder("r", "r")
    t0 = time.perf_counter()
    out = await counter(tok, timeout_ms=50).measure(chat(NEAR_1000), trace=trace)
    assert time.perf_counter() - t0 < 1.0
    assert (out.prompt_tokens, out.prompt_counted) == (904, False)
    step = trace.steps[-1]
    assert step.fields["source"] == "estimate" and "50 ms" in step.fields["fallback"]


async def test_without_a_tokenizer_the_estimate_decides_as_before():
    with pytest.raises(ContextLengthExceeded, match="about 904 prompt tokens"):
        await counter(None).measure(chat(NEAR_1000, max_tokens=200))
    assert (await counter(None).measure(chat(NEAR_1000))).prompt_tokens == 904


async def test_a_key_limit_lowers_the_context():
    tok = Scripted(450)
    with pytest.raises(ContextLengthExceeded, match="450 prompt tokens.*largest context is 480"):
        await counter(tok, limits=(4096,)).measure(chat("word " * 270), key_limit=480)
    assert tok.calls == 1


async def test_auto_clamp_lowers_max_tokens_to_what_fits():
    tok, trace = Scripted(900), Recorder("r", "r")
    c = counter(tok, auto_clamp_max_tokens=True)
    out = await c.measure(chat("word " * 100, max_tokens=4000), trace=trace)
    assert (out.max_tokens, out.body["max_tokens"], out.prompt_tokens) == (100, 100, 900)
    assert trace.steps[-1].name == "clamp"
    with pytest.raises(ContextLengthExceeded):  # not even min_output_tokens fit
        await counter(Scripted(995), auto_clamp_max_tokens=True).measure(
            chat("word " * 100, max_tokens=4000))


def test_clamp_rewrites_whichever_field_the_client_sent():
    req = parse_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                      "max_completion_tokens": 900}, "r")
    out = clamp(req, 10)
    assert out.body["max_completion_tokens"] == 10 and "max_tokens" not in out.body


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400), st.integers(0, 3000))
def test_the_real_count_lies_in_the_bounds_for_byte_level_tokenizers(text, _):
    """An upper bound the estimate may not undercut: UTF-8 bytes plus template overhead."""
    req = chat(text or "x", max_tokens=None)
    low, high = counter(None).bounds(req)
    assert low <= req.prompt_tokens <= high
    if not req.text.isascii():
        assert high >= len(req.text.encode("utf-8"))


def test_a_prompt_of_token_ids_is_already_exact():
    req = parse_completion({"model": "m", "prompt": [1, 2, 3]}, "r")
    assert counter(None).bounds(req) == (3, 3)


def test_the_engine_table_names_who_can_tokenize():
    assert engine_kind("vllm").tokenize.shape == "openai"
    assert engine_kind("sglang").tokenize.shape == "openai"
    assert engine_kind("llamacpp").tokenize.template_path == "/apply-template"
    assert all(engine_kind(k).tokenize is None for k in ("ollama", "openai", "emulator"))


@pytest.mark.parametrize("engine, paths", [("vllm", ["/tokenize"]),
                                           ("llamacpp", ["/apply-template", "/tokenize"])],
                         ids=["vllm", "llamacpp"])
async def test_engine_tokenizers_speak_each_engines_shape(engine, paths):
    async with serve_upstream(["ok"]) as up, aiohttp.ClientSession() as session:
        up.tokenize = 42
        b = Backend("a", "general", engine, up.base_url, "served-m", 4096)
        tok = EngineTokenizer(BackendClient(session, TimeoutConfig()), b,
                              engine_kind(engine).tokenize, 1.0)
        assert await tok.count(chat("hello")) == 42
        if engine == "vllm":
            assert up.tokenized == [{"model": "served-m", "messages": chat("hello").body[
                "messages"]}]
        else:
            assert up.tokenized[0] == {"messages": chat("hello").body["messages"]}
            assert up.tokenized[1] == {"content": "<rendered>", "add_special": True}


async def _post(client, text: str, max_tokens: int = 50):
    return await client.post("/v1/chat/completions", json={
        "model": "general", "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}]})


async def test_through_the_router_the_400_carries_the_engines_count():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url,
                            "context_length": 1000}], gate={"kind": "off"})
        async with open_router(cfg) as (_, client):
            up.tokenize = 1234
            r = await _post(client, NEAR_1000)
            assert r.status_code == 400
            err = r.json()["error"]
            assert err["code"] == "context_length_exceeded" and "1234 prompt tokens" in err[
                "message"]
            assert up.requests == []  # refused before any engine saw it
            up.tokenize = 600
            assert (await _post(client, NEAR_1000 + " more")).status_code == 200
            assert (await _post(client, "short")).status_code == 200
            assert len(up.tokenized) == 2  # the short prompt was not counted


async def test_through_the_router_a_hanging_tokenize_endpoint_falls_back():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url,
                            "context_length": 1000}], gate={"kind": "off"},
                          tokens={"timeout_ms": 50})
        async with open_router(cfg) as (_, client):
            up.tokenize = ("hang", 30)
            t0 = time.perf_counter()
            r = await _post(client, NEAR_1000)
            assert r.status_code == 200 and time.perf_counter() - t0 < 5


async def test_a_keys_max_context_tokens_refuses_with_the_real_count(gated):
    async with gated() as g:
        secret, _ = await g.issue(limits=Limits(max_context_tokens=1000))
        g.up.tokenize = 1100
        r = await g.client.post("/v1/chat/completions", headers={
            "authorization": f"Bearer {secret}"}, json={
            "model": "m", "max_tokens": 50,
            "messages": [{"role": "user", "content": NEAR_1000}]})
        assert r.status_code == 400
        assert "1100 prompt tokens" in r.json()["error"]["message"]
        assert "largest context is 1000" in r.json()["error"]["message"]
