"""A stop list on a backend that takes one stop (``list_stop: false``, configured or learned
from the engine's refusal): the engine gets the first, the router cuts at the rest — JSON and
SSE, across chunk boundaries, finishing with ``stop`` — never ignoring them."""

from __future__ import annotations

from typing import Any

from fakes.engine_rules import ollama_list_stop
from fakes.router import make_config, open_router
from fakes.streams import content, events
from fakes.upstream import serve_upstream

REPLY = "Hello from the fake engine."


def cfg(up: Any, engine: str = "vllm", quirks: dict[str, Any] | None = None) -> Any:
    b: dict[str, Any] = {"id": "one", "pool": "p", "engine": engine, "base_url": up.base_url}
    if quirks is not None:
        b["quirks"] = quirks
    return make_config([b])


def chat(stop: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "auto", "stop": stop,
            "messages": [{"role": "user", "content": "Say hello."}], **extra}


async def test_a_streamed_answer_is_cut_at_a_stop_spanning_two_chunks():
    async with serve_upstream(["ok"], REPLY) as up:
        async with open_router(cfg(up, quirks={"list_stop": False})) as (_, client):
            r = await client.post("/v1/chat/completions",
                                  json=chat(["zzz", " the fa", "engine"], stream=True))
    chunks = events(r.text)
    body = [c for c in chunks if isinstance(c, dict)]
    assert content(body) == "Hello from" and chunks[-1] == "[DONE]"
    assert body[-1]["choices"][0]["finish_reason"] == "stop"
    assert up.requests[0]["stop"] == "zzz"  # the engine was sent the one it takes


async def test_a_json_answer_is_cut_and_finishes_with_stop():
    async with serve_upstream(["ok"], REPLY) as up:
        async with open_router(cfg(up, quirks={"list_stop": False})) as (_, client):
            r = (await client.post("/v1/chat/completions", json=chat(["zzz", "fake"]))).json()
    assert r["choices"][0]["message"]["content"] == "Hello from the "
    assert r["choices"][0]["finish_reason"] == "stop"


async def test_the_usage_chunk_follows_the_cut_finish_when_asked_for():
    async with serve_upstream(["ok"], REPLY) as up:
        async with open_router(cfg(up, quirks={"list_stop": False})) as (_, client):
            r = await client.post("/v1/chat/completions", json=chat(
                ["zzz", "fake"], stream=True, stream_options={"include_usage": True}))
    body = [c for c in events(r.text) if isinstance(c, dict)]
    assert body[-2]["choices"][0]["finish_reason"] == "stop"
    assert body[-1]["choices"] == [] and body[-1]["usage"]["completion_tokens"] == 4
    assert "llmroute" in body[-1]


async def test_an_engine_that_takes_the_list_gets_it_and_nothing_is_cut():
    async with serve_upstream(["ok"], REPLY) as up:
        async with open_router(cfg(up)) as (_, client):
            r = await client.post("/v1/chat/completions", json=chat(["zzz", "fake"]))
    assert up.requests[0]["stop"] == ["zzz", "fake"]  # the fake engine does not stop
    assert r.json()["choices"][0]["message"]["content"] == REPLY


async def test_a_refused_list_stop_is_learned_and_the_rest_cut_by_the_router():
    """Ollama 0.1.49's ``/v1/completions`` refuses a list ``stop`` (the scripted upstream
    copies its words): the router learns ``list_stop: false`` from the refusal, sends the
    request once more with the first stop, and cuts at the others itself, streamed."""
    async with serve_upstream(["ok"], REPLY, rules=(ollama_list_stop,)) as up:
        async with open_router(cfg(up, engine="ollama")) as (_, client):
            body = {"model": "auto", "prompt": "Say hello.", "stop": ["zzz", "fake"]}
            first = await client.post("/v1/completions", json={**body, "stream": True})
            second = (await client.post("/v1/completions", json=body)).json()
            metrics = (await client.get("/metrics")).text
    chunks = [c for c in events(first.text) if isinstance(c, dict)]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "Hello from the "
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert second["choices"][0]["text"] == "Hello from the "
    assert [r["stop"] for r in up.requests] == [["zzz", "fake"], "zzz", "zzz"]
    assert 'llmroute_quirks_learned_total{backend="one",quirk="list_stop"} 1.0' in metrics
