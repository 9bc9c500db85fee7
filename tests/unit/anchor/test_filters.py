"""Filters: pool membership, capability (soft), context fit with the KV-pressure rule."""

from __future__ import annotations

import pytest
from fakes.anchor_ctx import backends, context, request, signals

from llmroute.anchor.capability import capabilities_of, required
from llmroute.anchor.filters.capability import CapabilityFilter
from llmroute.anchor.filters.context_fit import ContextFitFilter, usable_context
from llmroute.anchor.filters.pool import PoolFilter
from llmroute.types import Backend


def ids(bs) -> list[str]:
    return [b.id for b in bs]


def test_pool_filter():
    cands = backends("a", pool="x") + backends("b", pool="y") + backends("c", pool="x")
    assert ids(PoolFilter().filter(context(pools=frozenset({"x"})), cands)) == ["a", "c"]
    assert ids(PoolFilter().filter(context(), cands)) == ["a", "b", "c"]


@pytest.mark.parametrize("body,tools,needs", [
    ({}, False, set()),
    ({}, True, {"tools"}),
    ({"logprobs": True, "top_logprobs": 3}, False, {"logprobs"}),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
     False, {"continuation"}),
], ids=["plain", "tools", "logprobs", "assistant-prefill"])
def test_required(body, tools, needs):
    assert required(request(body=body, has_tools=tools)) == needs


def test_capability_filter_drops_backends_without_logprobs_unless_none_has_them():
    cands = backends("v", engine="vllm") + backends("o", engine="ollama") + \
        [Backend("h", "p", "openai", "http://h", "m", 4096, None, frozenset({"logprobs"}))]
    ctx = context(req=request(body={"logprobs": True}))
    assert ids(CapabilityFilter().filter(ctx, cands)) == ["v", "h"]
    only_ollama = backends("o1", "o2", engine="ollama")
    assert ids(CapabilityFilter().filter(ctx, only_ollama)) == ["o1", "o2"]
    assert capabilities_of(cands[2]) == frozenset({"logprobs"})


@pytest.mark.parametrize("kv,expected", [(None, 4000), (0.5, 4000), (0.8, 4000), (0.9, 3000),
                                         (1.0, 2000)],
                         ids=["unknown", "low", "at-threshold", "half-pressure", "full"])
def test_usable_context_shrinks_linearly_above_the_threshold(kv, expected):
    assert usable_context(4000, kv, threshold=0.8, min_fraction=0.5) == expected


def test_context_fit_prefers_roomy_backends_and_falls_back_to_any_fit():
    cands = backends("a", "b", ctx=4000)
    engines = {"a": signals(kv_cache_usage=1.0), "b": signals(kv_cache_usage=0.1)}
    f = ContextFitFilter()
    big = request(prompt_tokens=2500, max_tokens=100)
    assert ids(f.filter(context(engines=engines, req=big), cands)) == ["b"]
    both_full = {"a": signals(kv_cache_usage=1.0), "b": signals(kv_cache_usage=0.99)}
    assert ids(f.filter(context(engines=both_full, req=big), cands)) == ["a", "b"]
    huge = request(prompt_tokens=3990, max_tokens=100)
    assert f.filter(context(req=huge), cands) == []
