"""single strategy: model → pool / served model / auto by intent; fallbacks; unknown model."""

from __future__ import annotations

import pytest

from llmroute.errors import ModelNotFound
from llmroute.strategy.single import SingleStrategy
from llmroute.types import Backend, ChatRequest, Intent

BACKENDS = {b.id: b for b in [
    Backend("g1", "general", "vllm", "http://a", "small", 4096),
    Backend("g2", "general", "vllm", "http://b", "small", 4096),
    Backend("l1", "long", "vllm", "http://c", "big", 32768),
    Backend("c1", "code", "vllm", "http://d", "coder", 8192),
]}


def req(model: str) -> ChatRequest:
    return ChatRequest("chat", {}, model, False, "x", 5, None, "r")


def strategy(cross_pool: bool = False) -> SingleStrategy:
    return SingleStrategy(BACKENDS, {"summarization": "long"}, "general", max_attempts=2,
                          cross_pool=cross_pool)


@pytest.mark.parametrize(("model", "label", "pool", "primary"), [
    ("auto", "summarization", "long", ("l1",)),
    ("auto", "code", "general", ("g1", "g2")),
    ("long", "code", "long", ("l1",)),
    ("big", "chat", "long", ("l1",)),
    ("small", "chat", "general", ("g1", "g2")),
], ids=["auto-mapped", "auto-default", "pool-name", "served-model", "served-model-two"])
def test_plan_targets(model, label, pool, primary):
    plan = strategy().plan(req(model), Intent(label, 0.9))
    assert plan.pool == pool and plan.backend_ids == primary
    assert plan.max_attempts == 2


def test_fallbacks_are_every_other_backend_default_pool_first():
    plan = strategy(cross_pool=True).plan(req("long"), Intent("chat", 0.9))
    assert plan.fallback_ids == ("g1", "g2", "c1")
    assert set(plan.backend_ids) | set(plan.fallback_ids) == set(BACKENDS)


def test_a_named_pool_has_no_fallback_unless_cross_pool_is_allowed():
    assert strategy().plan(req("long"), Intent("chat", 0.9)).fallback_ids == ()
    auto = strategy().plan(req("auto"), Intent("summarization", 0.9))
    assert auto.fallback_ids == ("g1", "g2", "c1")  # ``auto`` keeps its fallbacks


def test_a_named_pool_may_still_fall_back_to_its_degradation_lighter_pool():
    plan = SingleStrategy(BACKENDS, {}, "general", lighter={"long": "code"}).plan(
        req("long"), Intent("chat", 0.9))
    assert plan.backend_ids == ("l1",) and plan.fallback_ids == ("c1",)


def test_unknown_model_is_404_naming_param():
    with pytest.raises(ModelNotFound) as info:
        strategy().plan(req("gpt-9"), Intent("chat", 0.9))
    assert info.value.status == 404 and info.value.param == "model"


def test_a_pool_name_wins_over_a_served_model_of_that_name_and_reasons_name_the_route():
    shadow = {**BACKENDS, "x1": Backend("x1", "code", "vllm", "http://e", "long", 4096)}
    s = SingleStrategy(shadow, {}, "general")
    named = s.plan(req("long"), Intent("chat", 0.9))
    assert (named.pool, named.backend_ids, named.reason) == ("long", ("l1",),
                                                            "model names pool long")
    served = s.plan(req("small"), Intent("chat", 0.9))
    assert (served.pool, served.backend_ids, served.reason) == ("general", ("g1", "g2"),
                                                               "served model small")
    pinned = SingleStrategy(BACKENDS, {}, "general", pool="code").plan(req("big"),
                                                                      Intent("chat", 0.9))
    assert (pinned.pool, pinned.backend_ids, pinned.reason) == ("code", ("c1",),
                                                               "strategy pool code")
