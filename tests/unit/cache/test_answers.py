"""The answer cache's decisions (``cache/answers.py``) over real entries: exact and
semantic hits, each guard's refusal, bypasses, scope, storing rules, TTL and LRU, purges,
and the replicas' events (a bad one dropped and counted, never served)."""

from __future__ import annotations

import numpy as np
import pytest

from llmroute.cache.answers import AnswerCache, Scope, served
from llmroute.cache.collect import unstorable
from llmroute.cache.entry import BadEntry, decode, encode
from llmroute.cache.keys import keys
from llmroute.config.cache import CacheConfig
from llmroute.types import ChatRequest, Intent

A = Scope("tenant-a", "", "single@1|p", "key-a")
ANSWER = {"id": "x", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "Berlin."},
     "finish_reason": "stop"}], "usage": {"total_tokens": 9}}
V = np.full(4, 0.5, dtype=np.float32)


def req(text: str, rid: str = "r", **body: object) -> ChatRequest:
    full = {"model": "m", "messages": [{"role": "user", "content": text}], **body}
    return ChatRequest("chat", full, "m", bool(body.get("stream")), text, 9, None, rid,
                       has_tools=bool(body.get("tools")))


def intent(label: str = "open_qa", vector: np.ndarray | None = V) -> Intent:
    return Intent(label, 0.9, embedding=vector)


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


async def no_embed(_: ChatRequest) -> None:
    return None


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(clock: Clock) -> AnswerCache:
    return AnswerCache(CacheConfig(enabled=True), no_embed, clock)


async def stored(cache: AnswerCache, text: str, scope: Scope = A, **body: object) -> None:
    found = await cache.lookup(req(text, "first", **body), intent(), scope, {})
    assert cache.store(found, req(text, "first", **body), intent(), scope, ANSWER) is not None


async def result(cache: AnswerCache, text: str, scope: Scope = A, label: str = "open_qa",
                 headers: dict[str, str] | None = None, **body: object) -> tuple[str, str]:
    found = await cache.lookup(req(text, **body), intent(label), scope, headers or {})
    return found.result, found.reason


async def test_an_identical_request_is_an_exact_hit_with_zero_usage(cache):
    await stored(cache, "What is the capital of Germany?")
    found = await cache.lookup(req("What is the capital of Germany?"), intent(), A, {})
    assert (found.result, found.entry.request_id) == ("hit-exact", "first")
    body = served(found.entry, req("x", "again"), 5)
    assert body["choices"] == ANSWER["choices"] and body["usage"]["total_tokens"] == 0
    assert body["id"] == "chatcmpl-again"


@pytest.mark.parametrize(("asked", "label", "expected"), [
    ("What is the capital city of Germany?", "open_qa", ("hit-semantic", "semantic")),
    ("What is the capital of France?", "open_qa", ("miss", "entities")),
    ("What is the capital of Germany in 1950?", "open_qa", ("miss", "numbers")),
    ("What is the capital city of Germany?", "chat", ("miss", "intent")),
    ("Germany is the capital of what?", "open_qa", ("miss", "order")),
    ("Tell me please which city is the capital of Germany", "open_qa", ("miss", "wording")),
], ids=["paraphrase", "other-country", "a-number", "other-intent", "order", "wording"])
async def test_the_semantic_tier_and_its_guards(cache, asked, label, expected):
    await stored(cache, "What is the capital of Germany?")
    assert await result(cache, asked, label=label) == expected


@pytest.mark.parametrize(("body", "headers", "expected"), [
    ({"temperature": 1.5}, {}, ("bypass", "temperature")),
    ({"n": 2}, {}, ("bypass", "n")),
    ({}, {"cache-control": "no-store"}, ("bypass", "no-store")),
    ({}, {"cache-control": "max-age=0, no-cache"}, ("bypass", "no-cache")),
], ids=["temperature", "n", "no-store", "no-cache"])
async def test_bypasses(cache, body, headers, expected):
    await stored(cache, "What is the capital of Germany?")
    assert await result(cache, "What is the capital of Germany?", headers=headers,
                        **body) == expected


async def test_time_sensitive_prompts_are_never_served(cache):
    assert await result(cache, "What is the latest news about Germany?") == (
        "bypass", "time_sensitive")
    assert await result(cache, "今天北京的天气怎么样？") == ("bypass", "time_sensitive")


async def test_tenants_keys_and_routes_never_share(cache):
    await stored(cache, "What is the capital of Germany?")
    for other in (A._replace(tenant="tenant-b"), A._replace(route="verify@1|p")):
        assert await result(cache, "What is the capital of Germany?", other) == (
            "miss", "not_found")


async def test_a_system_prompt_or_tools_keep_entries_apart(cache):
    await stored(cache, "What is the capital of Germany?")
    system = {"messages": [{"role": "system", "content": "Answer in French."},
                           {"role": "user", "content": "What is the capital of Germany?"}]}
    found = await cache.lookup(req("x", **system), intent(), A, {})
    assert (found.result, found.reason) == ("miss", "not_found")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert await result(cache, "What is the capital city of Germany?", tools=tools) == (
        "miss", "tools")


async def test_entries_lapse_and_the_least_recently_used_goes_first(clock):
    cache = AnswerCache(CacheConfig(enabled=True, max_entries=2, ttl_s=60), no_embed, clock)
    for text in ("one question", "two question", "three question"):
        await stored(cache, text)
    assert len(cache.entries) == 2
    assert (await result(cache, "one question"))[0] == "miss"
    clock.now += 61
    assert await result(cache, "three question") == ("miss", "not_found")


def test_only_complete_answers_are_stored():
    def with_choice(**choice: object) -> dict:
        return {**ANSWER, "choices": [{**ANSWER["choices"][0], **choice}]}
    assert unstorable(ANSWER) is None
    assert unstorable(with_choice(finish_reason="length")) == "unfinished"
    assert unstorable(with_choice(finish_reason="content_filter")) == "unfinished"
    assert unstorable(with_choice(message={"role": "assistant", "content": None,
                                           "tool_calls": [{"id": "c"}]})) == "tools"
    assert unstorable({**ANSWER, "choices": ANSWER["choices"] * 2}) == "choices"


async def test_purge_by_tenant_and_key(cache):
    await stored(cache, "q one")
    await stored(cache, "q two", A._replace(tenant="tenant-b", owner_key="key-b"))
    assert cache.purge(key_id="key-b") == 1
    assert cache.purge("tenant-a") == 1 and len(cache.entries) == 0


async def test_another_replicas_entry_is_served_and_a_bad_one_dropped(cache, clock):
    other = AnswerCache(CacheConfig(enabled=True), no_embed, clock)
    other.sharing = True
    await stored(other, "What is the capital of Germany?")
    (kind, data), = other.take_events()
    cache.apply_event(kind, data)
    cache.apply_event("put", data[:-5])
    cache.apply_event("put", data.replace(b'"choices":[', b'"choices":[],"x":['))
    assert await result(cache, "What is the capital of Germany?") == ("hit-exact", "exact")
    assert cache.metrics.dropped.labels("bad_entry")._value.get() == 2


def test_an_entry_round_trips_and_a_wrong_vector_is_refused(cache):
    k = keys(req("hello there"), ("", "", "r"))
    from llmroute.cache.anchors import Anchors
    from llmroute.cache.entry import Entry
    entry = Entry("e1", "t", "k", k.exact, k.context, k.query, Anchors.of(k.query),
                  "chat", ANSWER, "r1", 1.0, 2.0, V)
    data = encode(entry)
    assert decode(data, 4, 10_000).answer == ANSWER
    with pytest.raises(BadEntry):
        decode(data, 8, 10_000)
    with pytest.raises(BadEntry):
        decode(data, 4, 100)
