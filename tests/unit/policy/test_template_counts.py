"""Token counts that include what the engine adds (``policy/template.py``, ``counting.py``):
the chat template's fixed tokens learned once per backend from its own tokenizer, the output
budget the request really carries, image parts at their stated bound. The scripted engine
renders and counts as llama-server does (``fakes/upstream.chatml``)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.errors import UpstreamConnectError
from llmroute.policy.template import TemplateBook, fixed_tokens, probe
from llmroute.types import Backend, ChatRequest

CHAT = "/v1/chat/completions"
HI = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def llama(up: Any, context: int, **extra: Any) -> Any:
    return make_config([{"id": "l", "pool": "p", "engine": "llamacpp", "base_url": up.base_url,
                         "context_length": context}], **extra)


def test_the_fixed_part_is_one_message_less_its_wrapping():
    # SmolLM2 in the scripted count: one empty user message 26, three 36 → wrapping 5
    assert fixed_tokens(26, 36) == 21 + 1  # 21 fixed, +1: the wrapping beyond 4 tokens
    assert fixed_tokens(4, 12) == 0 and fixed_tokens(0, 0) == 0


class Probed:
    """A tokenizer counting the probe chats as SmolLM2's template would, failing at first."""

    def __init__(self, fail: int = 0):
        self.fail, self.calls = fail, 0

    async def count(self, request: ChatRequest) -> int:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            raise UpstreamConnectError("down", backend_id="b")
        return 26 if len(request.body["messages"]) == 1 else 36


async def test_the_book_learns_each_backend_once_and_retries_one_that_failed(monkeypatch):
    from llmroute.policy import template
    monkeypatch.setattr(template, "EngineTokenizer", Probed)
    b, c = (Backend(i, "p", "llamacpp", "http://h", "m", 64) for i in "bc")
    book = TemplateBook([(b, Probed()), (c, Probed(fail=1))], default=64)
    assert (book.fixed, book.known, book.done) == (64, 0, False)
    await book.learn()
    assert book.learned == {"b": 22} and book.fixed == 64 and book.known == 22
    await book.learn()
    assert book.done and book.fixed == 22 and book.learned == {"b": 22, "c": 22}
    assert probe([{"role": "user", "content": ""}]).body["messages"][0]["content"] == ""


@pytest.mark.parametrize("context,status", [(27 + 16 - 1, 400), (27 + 16, 200)],
                         ids=["one-over", "exactly-fits"])
async def test_a_prompt_one_token_over_the_context_is_refused_by_the_router(context, status):
    """"hi" is estimated at 5 tokens; the engine sees 27 (the template's default system
    prompt and generation prompt, ``chatml``). One token over the context with the 16-token
    output budget is the router's own 400, naming the real count; exactly at it is served."""
    async with serve_upstream(["ok"]) as up:
        up.tokenize = "chatml"
        async with open_router(llama(up, context)) as (rt, client):
            await rt.tokens.templates.learn()
            r = await client.post(CHAT, json={**HI, "max_tokens": 16})
    assert r.status_code == status
    if status == 400:
        assert "27 prompt tokens (counted by the engine's tokenizer) plus 16 output" in \
            r.json()["error"]["message"]
        assert not up.requests  # nothing reached the engine
    else:
        assert len(up.requests) == 1


async def test_before_learning_the_default_bound_already_sends_it_to_the_count():
    async with serve_upstream(["ok"]) as up:
        up.tokenize = "chatml"
        async with open_router(llama(up, 40)) as (_, client):
            r = await client.post(CHAT, json={**HI, "max_tokens": 16})
    assert r.status_code == 400 and "27 prompt tokens" in r.json()["error"]["message"]


async def test_the_output_budget_is_the_one_the_request_carries():
    """Both budgets given: llama.cpp is sent the smaller (``max_tokens``: 10), vLLM reads
    ``max_completion_tokens`` (2,000). The same request fits the first, not the second."""
    body = {**HI, "max_tokens": 10, "max_completion_tokens": 2000}
    async with serve_upstream(["ok"]) as up:
        up.tokenize = 30
        async with open_router(llama(up, 1000)) as (_, client):
            assert (await client.post(CHAT, json=body)).status_code == 200
        vllm = make_config([{"id": "v", "pool": "p", "engine": "vllm", "base_url": up.base_url,
                             "context_length": 1000}])
        async with open_router(vllm) as (_, client):
            r = await client.post(CHAT, json=body)
    assert r.status_code == 400 and "plus 2000 output tokens" in r.json()["error"]["message"]
    assert up.requests[0]["max_tokens"] == 10


async def test_an_image_part_counts_its_stated_bound():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    body = {"model": "auto", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, image]}]}
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "o", "pool": "p", "engine": "ollama", "base_url": up.base_url,
                            "context_length": 2048}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=body)
        cfg = make_config([{"id": "o", "pool": "p", "engine": "ollama", "base_url": up.base_url,
                            "context_length": 2048}], tokens={"image_tokens": 576})
        async with open_router(cfg) as (_, client):
            assert (await client.post(CHAT, json=body)).status_code == 200
    assert r.status_code == 400 and "about 2889 prompt tokens" in r.json()["error"]["message"]
