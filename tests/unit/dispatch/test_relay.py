"""The fuse on the real request path over scripted upstreams on loopback: every trigger hands
the answer to the next backend inside one client stream (same id, no text lost or doubled,
the handoff in the final chunk and in /debug/fuse); nothing left → an error event."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fakes.router import make_config, open_router
from fakes.streams import content, events
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
PRIMARY = "The quick brown fox jumps"
FALLBACK = " over the lazy dog."


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "auto", "stream": True,
            "messages": [{"role": "user", "content": "Tell me about the fox."}], **extra}


def backends(*ups: Any, engine: str = "vllm", **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"b{i}", "pool": "general", "base_url": up.base_url, "engine": engine,
             **extra} for i, up in enumerate(ups)]


TRIGGERS = [("entropic", 1), ("cut", 2), "malformed", "inband", ("stall", 3)]
REASONS = ["entropy", "cut", "malformed", "inband", "stall"]


@pytest.mark.parametrize(("step", "reason"), list(zip(TRIGGERS, REASONS, strict=True)),
                         ids=REASONS)
async def test_trigger_hands_off_into_one_seamless_stream(step, reason):
    async with serve_upstream([step], PRIMARY) as a, serve_upstream(["ok"], FALLBACK) as b:
        cfg = make_config(backends(a, b), timeouts={"stall_s": 0.3})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat())
            debug = (await client.get("/debug/fuse")).json()
            metrics = (await client.get("/metrics")).text
    chunks = events(r.text)
    assert chunks[-1] == "[DONE]"
    body = [c for c in chunks if isinstance(c, dict)]
    sent_before = PRIMARY.split(" ")[:{"entropy": 3, "cut": 2}.get(reason, 1)]
    assert content(body) == " ".join(sent_before) + FALLBACK
    assert {c["id"] for c in body} == {"chatcmpl-1"}
    handoffs = body[-1]["llmroute"]["handoffs"]
    assert [(h["from"], h["to"], h["reason"]) for h in handoffs] == [("b0", "b1", reason)]
    assert handoffs[0]["at_token"] == len(sent_before) and handoffs[0]["gap_ms"] >= 0
    continued = next(body for body in b.requests if body["stream"])["messages"]
    assert continued[-1] == {"role": "assistant", "content": " ".join(sent_before)}
    assert b.requests[0]["continue_final_message"] is True
    assert b.requests[0]["add_generation_prompt"] is False
    assert debug["recent"][0]["reason"] == reason and debug["counts"][0]["count"] == 1
    assert f'llmroute_fuse_handoffs_total{{backend="b0",reason="{reason}"}} 1.0' in metrics


async def test_entropy_window_is_stored_with_the_event():
    async with serve_upstream([("entropic", 2)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b, \
            open_router(make_config(backends(a, b))) as (_, client):
        await client.post(CHAT, json=chat())
        event = (await client.get("/debug/fuse")).json()["recent"][0]
    # words 0–1 calm; words 2–3 go out although flat; the third flat word trips the run
    assert event["kind"] == "handoff" and event["at_token"] == 4
    assert event["window"][:2] == [pytest.approx(0.0721, abs=0.001)] * 2
    assert event["window"][2:] == [pytest.approx(3.912, abs=0.001)] * 3


async def test_llamacpp_echo_of_the_prefix_is_cut_at_the_seam():
    async with serve_upstream([("entropic", 1)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK, echo=True) as b:
        cfg = make_config(backends(a, engine="vllm") + [
            {"id": "b1", "pool": "general", "base_url": b.base_url, "engine": "llamacpp"}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat())
    assert content(events(r.text)[:-1]) == "The quick brown" + FALLBACK
    assert "continue_final_message" not in b.requests[0]


async def test_logprobs_are_requested_but_not_leaked_unless_asked():
    async with serve_upstream(["ok"]) as a, \
            open_router(make_config(backends(a))) as (_, client):
        plain = events((await client.post(CHAT, json=chat())).text)
        asked = events((await client.post(CHAT, json=chat(logprobs=True,
                                                             top_logprobs=2))).text)
    assert a.requests[0]["logprobs"] is True and a.requests[0]["top_logprobs"] == 5
    assert all("logprobs" not in c["choices"][0] for c in plain[:-1])
    tops = asked[0]["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert len(tops) == 2


async def test_disabled_fuse_neither_asks_for_logprobs_nor_trips():
    async with serve_upstream([("entropic", 1)], PRIMARY) as a, serve_upstream(["ok"]) as b:
        cfg = make_config(backends(a, b), fuse={"enabled": False})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat())
    assert content(events(r.text)[:-1]) == PRIMARY and not b.requests
    assert "logprobs" not in a.requests[0]


async def test_pool_threshold_above_the_tokens_entropy_does_not_trip():
    async with serve_upstream([("entropic", 1)], PRIMARY) as a, serve_upstream(["ok"]) as b:
        cfg = make_config(backends(a, b),
                          fuse={"pools": {"general": {"threshold_nats": 4.0, "run_tokens": 1}}})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat())
    assert content(events(r.text)[:-1]) == PRIMARY and not b.requests


async def test_entropy_run_with_nowhere_to_go_lets_the_primary_finish():
    async with serve_upstream([("entropic", 1)], PRIMARY) as a, \
            open_router(make_config(backends(a))) as (_, client):
        r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert chunks[-1] == "[DONE]" and content(chunks[:-1]) == PRIMARY
    assert chunks[-2]["llmroute"] == {"handoffs": []}


async def test_tool_call_in_flight_is_failed_cleanly_not_continued_as_prose():
    async with serve_upstream(["tool_cut"]) as a, serve_upstream(["ok"]) as b, \
            open_router(make_config(backends(a, b))) as (_, client):
        r = await client.post(CHAT, json=chat())
        debug = (await client.get("/debug/fuse")).json()
    chunks = events(r.text)
    assert "[DONE]" not in chunks and set(chunks[-1]["error"]) == {"message", "type",
                                                                   "param", "code"}
    assert not b.requests
    assert debug["recent"][0]["kind"] == "dead_end"


async def test_one_budget_covers_retries_and_handoffs():
    async with serve_upstream([("status", 503)]) as a, \
            serve_upstream([("cut", 2)], PRIMARY) as b, serve_upstream(["ok"]) as c:
        cfg = make_config(backends(a, b, c), retry={"max_attempts": 2})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert "error" in chunks[-1] and content(chunks[:-1]) == "The quick"
    assert (len(a.requests), len(b.requests), len(c.requests)) == (1, 1, 0)


async def test_no_backend_left_after_a_cut_ends_with_an_error_event():
    """The fallback's 503 does not replace the cut: the event says what broke the answer."""
    async with serve_upstream([("cut", 2)], PRIMARY) as a, serve_upstream([("status", 503)]) as b, \
            open_router(make_config(backends(a, b))) as (_, client):
        r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert "[DONE]" not in chunks and chunks[-1]["error"]["code"] == "upstream_connect_error"
    assert content(chunks[:-1]) == "The quick"


async def test_a_cut_with_nowhere_to_go_says_the_connection_closed_mid_answer():
    async with serve_upstream([("cut", 2)], PRIMARY) as a, \
            open_router(make_config(backends(a))) as (_, client):
        r = await client.post(CHAT, json=chat())
    error = events(r.text)[-1]["error"]
    assert error["code"] == "upstream_connect_error"
    assert error["message"] == "the connection closed in the middle of the answer"


async def test_429_before_the_first_byte_fails_over_and_honours_retry_after():
    async with serve_upstream([("status", 429, 30)]) as a, serve_upstream(["ok"]) as b, \
            open_router(make_config(backends(a, b))) as (rt, client):
        first = await client.post(CHAT, json=chat())
        second = await client.post(CHAT, json=chat())
        held = not rt.breaker.allow("b0", rt.clock())
    assert first.headers["x-llmroute-backend"] == "b1" == second.headers["x-llmroute-backend"]
    assert len(a.requests) == 1 and held


@pytest.mark.parametrize("engine", ["llamacpp", "vllm"])
async def test_context_length_refusal_moves_to_a_larger_context(engine):
    async with serve_upstream([("context", engine)]) as small, \
            serve_upstream(["ok"]) as same, serve_upstream(["ok"]) as big:
        cfg = make_config([
            {"id": "small", "pool": "general", "base_url": small.base_url, "context_length": 2048},
            {"id": "same", "pool": "general", "base_url": same.base_url, "context_length": 2048},
            {"id": "big", "pool": "general", "base_url": big.base_url, "context_length": 8192}])
        async with open_router(cfg) as (rt, client):
            rt.stats.finished("same", 0, ok=True, latency_ms=5000)  # rank "small" first
            rt.stats.finished("big", 0, ok=True, latency_ms=9000)
            r = await client.post(CHAT, json=chat(stream=False))
    assert r.status_code == 200 and r.headers["x-llmroute-backend"] == "big"
    assert not same.requests


async def test_context_length_refusal_with_no_larger_context_is_the_clients_400():
    async with serve_upstream([("context", "llamacpp")]) as a, serve_upstream(["ok"]) as b, \
            open_router(make_config(backends(a, b, context_length=2048))) as (_, client):
        r = await client.post(CHAT, json=chat(stream=False))
    assert r.status_code == 400 and r.json()["error"]["type"] == "exceed_context_size_error"


async def test_breaker_state_is_a_prometheus_gauge():
    cfg = make_config([{"id": "dead", "pool": "general", "base_url": "http://127.0.0.1:9"}],
                      breaker={"min_requests": 1, "cooldown_s": 60})
    async with open_router(cfg) as (_, client):
        before = (await client.get("/metrics")).text
        await client.post(CHAT, json=chat(stream=False))
        after = (await client.get("/metrics")).text
    assert 'llmroute_breaker_state{backend="dead"} 0.0' in before
    assert 'llmroute_breaker_state{backend="dead"} 2.0' in after


async def test_a_backend_configured_without_logprobs_runs_without_the_entropy_trigger():
    async with serve_upstream([("entropic", 1)], PRIMARY) as a, serve_upstream(["ok"]) as b:
        cfg = make_config([*backends(a, capabilities=["tools"]),
                           {"id": "b1", "pool": "general", "base_url": b.base_url}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat())
            debug = (await client.get("/debug/fuse")).json()
    assert content(events(r.text)[:-1]) == PRIMARY and not b.requests
    assert "logprobs" not in a.requests[0]
    assert debug["backends"]["b0"]["entropy_trigger"] is False
    assert debug["backends"]["b1"]["entropy_trigger"] is True


@pytest.mark.parametrize("usage", [False, True], ids=["finish-last", "usage-last"])
async def test_only_the_last_chunk_carries_the_extension(usage):
    async with serve_upstream([("cut", 2)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b, \
            open_router(make_config(backends(a, b))) as (_, client):
        r = await client.post(CHAT, json=chat(stream_options={"include_usage": usage}))
    chunks = events(r.text)[:-1]
    marked = [i for i, c in enumerate(chunks) if "llmroute" in c]
    assert marked == [len(chunks) - 1]
    assert (chunks[-1]["choices"] == []) is usage
    assert len(chunks[-1]["llmroute"]["handoffs"]) == 1


async def test_a_cut_after_the_finish_chunk_ends_the_answer_without_a_handoff():
    async with serve_upstream(["cut_after_finish"], PRIMARY) as a, \
            serve_upstream(["ok"]) as b, \
            open_router(make_config(backends(a, b))) as (_, client):
        r = await client.post(CHAT, json=chat())
    chunks = events(r.text)
    assert chunks[-1] == "[DONE]" and content(chunks[:-1]) == PRIMARY
    assert chunks[-2]["llmroute"] == {"handoffs": []} and not b.requests


async def test_prewarm_sends_the_next_candidate_the_conversation_first():
    async with serve_upstream([("entropic", 1)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b, \
            open_router(make_config(backends(a, b), fuse={"prewarm": True})) as (_, client):
        r = await client.post(CHAT, json=chat(max_tokens=50))
    warm, *during_run, cont = b.requests
    assert warm["stream"] is False and warm["max_tokens"] == 1
    assert warm["messages"] == chat()["messages"] and "logprobs" not in warm
    # while the high-entropy run lasts, the fallback is kept warm token by token
    assert during_run and all(w["max_tokens"] == 1 for w in during_run)
    prefixes = [w["messages"][-1]["content"] for w in during_run]
    assert all("The quick brown".startswith(p) and p for p in prefixes)
    assert cont["stream"] is True and cont["messages"][-1]["content"] == "The quick brown"
    assert content(events(r.text)[:-1]) == "The quick brown" + FALLBACK


@pytest.mark.parametrize("on", [True, False], ids=["warm-on-suspect", "off"])
async def test_without_prewarm_the_fallback_is_warmed_once_the_fuse_is_suspect(on):
    async with serve_upstream([("entropic", 1)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b, \
            open_router(make_config(backends(a, b),
                                    fuse={"warm_on_suspect": on})) as (_, client):
        r = await client.post(CHAT, json=chat(max_tokens=50))
    *warm, cont = b.requests
    assert cont["stream"] is True and cont["messages"][-1]["content"] == "The quick brown"
    assert content(events(r.text)[:-1]) == "The quick brown" + FALLBACK
    if not on:
        assert warm == []
        return
    # nothing while the first word was calm; then the text so far, as the run went on
    prefixes = [w["messages"][-1]["content"] for w in warm]
    assert warm and all(w["stream"] is False and w["max_tokens"] == 1 for w in warm)
    assert all(p.startswith("The quick") and "The quick brown".startswith(p) for p in prefixes)


async def test_a_calm_stream_warms_no_fallback():
    async with serve_upstream([("entropic", 99)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b, \
            open_router(make_config(backends(a, b))) as (_, client):
        r = await client.post(CHAT, json=chat(max_tokens=50))
    assert content(events(r.text)[:-1]) == PRIMARY and b.requests == []


async def test_prewarm_starts_while_the_primary_is_still_prefilling():
    async with serve_upstream([("hang", 0.6)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b, \
            open_router(make_config(backends(a, b), fuse={"prewarm": True})) as (_, client):
        pending = asyncio.ensure_future(client.post(CHAT, json=chat(max_tokens=50)))
        await asyncio.sleep(0.3)
        warmed_before_first_byte = [w["max_tokens"] for w in b.requests]
        r = await pending
    assert warmed_before_first_byte == [1]
    assert content(events(r.text)[:-1]) == PRIMARY
