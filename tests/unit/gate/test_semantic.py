"""SemanticGate: labels in English and Chinese, the Intent's fields, bad input, the second
opinion, micro-batched async classification, the cache, overrides and extra intents."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes.clock import FakeClock
from llmroute.config import GateConfig
from llmroute.gate.compress import prompt_request
from llmroute.gate.semantic import SemanticGate
from llmroute.types import ChatRequest, Intent

Start = Callable[..., Awaitable[SemanticGate]]
"""The ``started`` fixture (conftest): ``await started(cfg, **kwargs)``."""


def assert_valid(intent: Intent, labels: tuple[str, ...]) -> None:
    assert intent.label in labels
    assert 0.0 <= intent.confidence <= 1.0 and 0.0 <= intent.conflict <= 1.0
    assert 0.1 <= intent.complexity <= 5.0
    assert intent.entropy >= 0.0
    probs = [p for _, p in intent.runners_up]
    assert probs == sorted(probs, reverse=True)


@pytest.mark.parametrize(("text", "label"), [
    ("Write a Rust function that parses an ISO 8601 date", "code"),
    ("What is 17 times 23 minus 5?", "math"),
    ("Translate 'good morning, how did you sleep' into German", "translation"),
    ("Summarize the following article in two sentences: the city council voted ...", "summarization"),
    ("Write a short poem about autumn rain", "creative_writing"),
    ("用Go写一个并发安全的计数器", "code"),
    ("请把这句话翻译成日语：明天见", "translation"),
    ("给我的咖啡店想十个名字", "brainstorming"),
    ("帮我总结一下这篇文章的要点", "summarization"),
], ids=["en-code", "en-math", "en-translation", "en-summary", "en-poem", "zh-code",
        "zh-translation", "zh-brainstorm", "zh-summary"])
async def test_labels(gate: SemanticGate, text: str, label: str) -> None:
    intent = await gate.classify(prompt_request(text))
    assert intent.label == label, intent
    assert_valid(intent, gate.model.classes)


async def test_tools_in_the_request_mean_tool_call(gate: SemanticGate) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    intent = await gate.classify(prompt_request("", [{"role": "user", "content": "Paris?"}],
                                                tools))
    assert intent.label == "tool_call"


@pytest.mark.parametrize("body", [
    {"messages": []},
    {"messages": [{"role": "system", "content": "You are helpful."}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": [{"role": "user", "content": "   \n "}]},
], ids=["empty", "system-only", "image-only", "whitespace"])
async def test_nothing_to_classify_is_the_documented_default(gate: SemanticGate,
                                                             body: dict) -> None:
    request = ChatRequest("chat", body, "auto", False, "", 0, None, "r")
    intent = await gate.classify(request)
    assert (intent.label, intent.confidence, intent.complexity) == ("chat", 0.0, 0.1)


@pytest.mark.parametrize("text", [
    "a" * 1_000_000, "\ud800 lone \udfff surrogates", "🙂🚀🔥" * 50,
    "Please 翻译 this into français, 谢谢 🙏", "```python\nprint(1)\n", "\x00\x01\x02",
], ids=["1MB", "surrogates", "emoji", "mixed-scripts", "open-fence", "control"])
async def test_bad_input_gives_a_valid_intent(gate: SemanticGate, text: str) -> None:
    assert_valid(await gate.classify(prompt_request(text)), gate.model.classes)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_any_text_gives_a_valid_intent(gate: SemanticGate, text: str) -> None:
    intent = asyncio.run(gate.classify(prompt_request(text)))
    if text.strip():
        assert_valid(intent, gate.model.classes)
        assert math.isclose(intent.confidence + sum(p for _, p in intent.runners_up), 1.0,
                            abs_tol=0.05) or len(intent.runners_up) == 3


async def test_second_opinion_below_the_threshold(gate: SemanticGate, started: Start) -> None:
    always = await started(GateConfig(second_opinion_below=1.0, cache_size=0), model=gate.model)
    never = await started(GateConfig(second_opinion_below=0.0), model=gate.model)
    request = prompt_request("how do I make my sourdough less sour?")
    assert (await always.classify(request)).source == "fast+encoder"
    assert (await never.classify(request)).source == "fast"


@pytest.mark.parametrize("text", [
    "how do I make my sourdough less sour?", "怎么让我的酸面包没那么酸？",
    "用sourdough starter做面包，怎么让它没那么酸？",
], ids=["english", "chinese", "half-chinese"])
async def test_the_multilingual_encoder_is_asked_in_every_language(
        gate: SemanticGate, text: str, started: Start) -> None:
    """The fine-tuned encoder reads English and Chinese alike (MiniLM, English-only, was not
    asked about mostly-Chinese text)."""
    always = await started(GateConfig(second_opinion_below=1.0, cache_size=0), model=gate.model)
    assert (await always.classify(prompt_request(text))).source == "fast+encoder"


async def test_concurrent_calls_are_micro_batched_and_agree_with_one_at_a_time(
        gate: SemanticGate, started: Start) -> None:
    g = await started(GateConfig(second_opinion_below=1.0, max_wait_ms=5.0, max_batch=64),
                      model=gate.model)
    texts = [f"question number {i}: why is the sky blue at noon?" for i in range(32)]
    intents = await asyncio.gather(*(g.classify(prompt_request(t)) for t in texts))
    assert g._batcher is not None and g._batcher.batches <= 3
    assert all(i.source == "fast+encoder" for i in intents)
    fresh = await started(GateConfig(second_opinion_below=1.0), model=gate.model)
    assert [i.label for i in intents] == [(await fresh.classify(prompt_request(t))).label
                                          for t in texts]


async def test_cache_lru_ttl_with_a_fake_clock(gate: SemanticGate, started: Start) -> None:
    clock = FakeClock()
    g = await started(GateConfig(cache_size=2, cache_ttl_s=10.0), clock=clock,
                      model=gate.model)
    await g.classify(prompt_request("write a haiku about rain"))
    assert len(g._cache) == 1
    clock.advance(11.0)
    g._cache.expire()
    assert len(g._cache) == 0
    for t in ("a b c", "d e f", "g h i"):
        await g.classify(prompt_request(t))
    assert len(g._cache) == 2


async def test_not_started_answers_from_the_rules() -> None:
    intent = await SemanticGate(GateConfig()).classify(prompt_request("write python code"))
    assert intent.source == "rules" and intent.label == "code"


async def test_rule_override_applies_after_the_model(gate: SemanticGate, started: Start) -> None:
    g = await started(GateConfig(rules={"tool_call": [r"\bRFC ?\d{3,4}\b"]}), model=gate.model)
    intent = await g.classify(prompt_request("What does RFC 9110 say about caching?"))
    assert intent.label == "tool_call" and intent.source.endswith("+rule")
    assert (await gate.classify(prompt_request("What does RFC 9110 say about caching?"))
            ).label != "tool_call"


async def test_adding_an_intent_by_utterances(started: Start) -> None:
    legal = [f"Is clause {i} of this lease enforceable under tenancy law?" for i in range(20)]
    legal += [f"Draft a non-disclosure agreement section {i} about liability" for i in range(20)]
    g = await started(GateConfig(utterances={"legal": legal}, encoder=False))
    assert "legal" in g.model.classes
    assert (await g.classify(prompt_request("Is this lease clause about liability enforceable?"))
            ).label == "legal"


async def test_composite_when_two_intents_are_close(gate: SemanticGate) -> None:
    intent = await gate.classify(prompt_request(
        "Summarize this paragraph and then translate the summary into French: "
        "The committee met on Tuesday and agreed to extend the deadline."))
    assert {intent.label, intent.runners_up[0][0]} == {"summarization", "translation"}


@pytest.mark.parametrize("text", [
    "Translate this paragraph into French and then summarize it in two sentences: "
    "The committee met on Tuesday to discuss the budget.",
    "把下面这段话翻译成英文，然后总结要点：今天公司召开了年度大会，讨论了明年的预算和招聘计划。"])
async def test_two_tasks_in_sequence_are_composite_though_one_reads_far_stronger(
        gate: SemanticGate, text: str) -> None:
    intent = await gate.classify(prompt_request(text))
    assert set(intent.composite) == {"summarization", "translation"}
    assert intent.composite[0] == intent.label and intent.is_composite


@pytest.mark.parametrize("text", [
    "If the number is even then divide it by 2, what do you get for 10?",
    "Summarize the meeting: we reviewed the budget, then we discussed hiring, then lunch.",
    "What is the capital of France?"])
async def test_one_task_with_a_then_in_it_is_not_composite(gate: SemanticGate,
                                                           text: str) -> None:
    assert (await gate.classify(prompt_request(text))).composite == ()
