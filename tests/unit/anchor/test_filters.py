"""Filters: pool membership, capability (soft), context fit with the KV-pressure rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from fakes.anchor_ctx import backends, context, request, signals

from llmroute.anchor.filters.capability import CapabilityFilter, required
from llmroute.anchor.filters.context_fit import ContextFitFilter, usable_context
from llmroute.anchor.filters.health import HealthFilter
from llmroute.anchor.filters.pool import PoolFilter
from llmroute.backends.engines import capabilities_of
from llmroute.config import BreakerConfig
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.types import Backend, Outcome


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


@given(st.lists(st.integers(1, 8000), min_size=1, max_size=6), st.integers(0, 6000),
       st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=6, max_size=6),
       st.sampled_from([0.0, 0.25, 0.5, 1.0]))
def test_context_fit_fast_path_keeps_what_the_full_rule_keeps(sizes, prompt, kv, min_fraction):
    cands = [Backend(f"b{i}", "p", "vllm", "http://x", "m", n) for i, n in enumerate(sizes)]
    engines = {f"b{i}": signals(kv_cache_usage=u) for i, u in enumerate(kv) if u is not None}
    ctx = context(engines=engines, req=request(prompt_tokens=prompt, max_tokens=100))
    need = prompt + 100
    fits = [b for b in cands if need <= b.context_length]
    roomy = [b for b in fits if need <= usable_context(
        b.context_length, engines[b.id].kv_cache_usage if b.id in engines else None,
        0.8, min_fraction)]
    got = ContextFitFilter(kv_min_fraction=min_fraction).filter(ctx, cands)
    assert ids(got) == ids(roomy or fits)


def test_health_filter_asks_the_breaker_only_about_flagged_backends():
    cands = backends("a", "b", "c")
    br = CircuitBreaker(BreakerConfig(window_s=10, min_requests=1, failure_rate=0.5,
                                      cooldown_s=5))
    f = HealthFilter()
    assert ids(f.filter(context(breakers=br.views()), cands)) == ["a", "b", "c"]
    br.record("b", Outcome.FAILURE, 0.0)
    assert ids(f.filter(context(now=1.0, breakers=br.views()), cands)) == ["a", "c"]
    # half-open: a probe
    assert ids(f.filter(context(now=6.0, breakers=br.views()), cands)) == ["a", "b", "c"]
