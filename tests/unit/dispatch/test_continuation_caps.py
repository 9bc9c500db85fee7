"""A handoff's continuation respects the fallback backend's configured capabilities (not only
its engine kind): without ``continuation`` the generic form, without ``logprobs`` none asked
for; and the fallback's body is shaped to its engine's quirks."""

from __future__ import annotations

from typing import Any

from fakes.router import make_config, open_router
from fakes.streams import content, events
from fakes.upstream import serve_upstream

from llmroute.fuse.handoff import CONTINUE_INSTRUCTION

PRIMARY, FALLBACK = "The quick brown fox jumps", " over the lazy dog."
ASK = [{"role": "user", "content": "Tell me about the fox."}]


async def chat(client: Any, **extra: Any) -> Any:
    """A streamed chat through the router, ``extra`` fields added."""
    return await client.post("/v1/chat/completions",
                             json={"model": "auto", "stream": True, "messages": ASK, **extra})


def pair(a: Any, b: Any, engine: str, capabilities: list[str] | None) -> list[dict[str, Any]]:
    fallback: dict[str, Any] = {"id": "b1", "pool": "general", "base_url": b.base_url,
                                "engine": engine}
    if capabilities is not None:
        fallback["capabilities"] = capabilities
    return [{"id": "b0", "pool": "general", "base_url": a.base_url, "engine": "vllm"},
            fallback]


async def test_a_fallback_configured_without_continuation_gets_the_generic_form():
    async with serve_upstream([("cut", 2)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b:
        cfg = make_config(pair(a, b, "vllm", ["tools", "logprobs"]))
        async with open_router(cfg) as (_, client):
            r = await chat(client)
    assert content(events(r.text)[:-1]) == "The quick" + FALLBACK
    sent = b.requests[0]
    assert "continue_final_message" not in sent and "add_generation_prompt" not in sent
    assert sent["messages"][-2:] == [{"role": "assistant", "content": "The quick"},
                                     {"role": "user", "content": CONTINUE_INSTRUCTION}]


async def test_a_fallback_configured_without_logprobs_is_not_asked_for_them():
    async with serve_upstream([("cut", 2)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b:
        cfg = make_config(pair(a, b, "vllm", ["tools", "continuation"]))
        async with open_router(cfg) as (_, client):
            await chat(client)
    assert a.requests[0]["logprobs"] is True  # the primary's entropy trigger is armed
    sent = b.requests[0]
    assert "logprobs" not in sent and "top_logprobs" not in sent
    assert sent["continue_final_message"] is True


async def test_a_llamacpp_fallback_without_continuation_is_not_sent_a_prefill_to_echo():
    async with serve_upstream([("cut", 2)], PRIMARY) as a, \
            serve_upstream(["ok"], FALLBACK) as b:
        cfg = make_config(pair(a, b, "llamacpp", ["tools", "logprobs"]))
        async with open_router(cfg) as (_, client):
            r = await chat(client, max_completion_tokens=40)
    assert content(events(r.text)[:-1]) == "The quick" + FALLBACK
    sent = b.requests[0]
    assert sent["messages"][-1] == {"role": "user", "content": CONTINUE_INSTRUCTION}
    assert sent["max_tokens"] == 38 and "max_completion_tokens" not in sent
