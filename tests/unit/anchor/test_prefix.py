"""The router-side prefix index and its calibration: longest leading run per backend, a
bounded LRU that drops a prefix's tail first, the engine's cache size as its bound, trust
from the engine's own hit counters, and a restart (counters going back) forgetting it."""

from __future__ import annotations

import pytest
from fakes.anchor_ctx import backends, context, request, signals

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.prefix import Affinity

AB = backends("a", "b")


def text(*ids: int) -> str:
    """A prompt of 12-character blocks (4 tokens each)."""
    return "".join(f"{i:011d}|" for i in ids)


def test_a_backends_run_ends_at_the_first_key_it_lacks() -> None:
    index = PrefixIndex(block_tokens=4)
    index.record(index.keys(text(1, 2, 3)), "a")
    index.record(index.keys(text(1, 2, 9)), "b")
    assert index.matched(index.keys(text(1, 2, 3, 4))) == {"a": 3, "b": 2}
    assert index.matched(index.keys(text(7))) == {}


def test_the_lru_is_bounded_and_drops_a_prefix_tail_first() -> None:
    index = PrefixIndex(block_tokens=4, capacity=5)
    index.record(index.keys(text(1, 2, 3)), "a")
    index.record(index.keys(text(8, 9)), "a")
    index.record(index.keys(text(5)), "a")  # six keys held: the oldest goes, a's block 3
    assert index.size("a") == 5
    assert index.matched(index.keys(text(1, 2, 3))) == {"a": 2}


def test_the_engines_cache_size_bounds_what_the_index_keeps() -> None:
    affinity = Affinity(PrefixIndex(block_tokens=4))
    for i in range(10):
        affinity.dispatched(request(text(i), prompt_tokens=4), "a", 4)
    affinity.observe("a", signals(kv_capacity_tokens=12))  # room for three keys
    assert affinity.index.size("a") == 3


def test_trust_follows_the_hits_the_engine_reports() -> None:
    affinity = Affinity(PrefixIndex(block_tokens=4))
    affinity.pricing = True
    prompt = text(1, 2, 3, 4, 5)
    affinity.observe("a", signals(prefix_cache_queries_total=0, prefix_cache_hits_total=0))
    for turn in range(3):  # each sent twice: 20 tokens predicted cached the second time
        affinity.dispatched(request(prompt + str(turn), prompt_tokens=21), "a", 21)
        affinity.dispatched(request(prompt + str(turn), prompt_tokens=21), "a", 21)
    # the engine found none of the 60 tokens predicted after the first (it evicted them)
    affinity.observe("a", signals(prefix_cache_queries_total=126, prefix_cache_hits_total=0))
    assert affinity.trust("a") == pytest.approx(0.7)
    cached = affinity.cached_tokens(context(req=request(prompt + "x", prompt_tokens=21)), AB)
    assert cached == [pytest.approx(20 * 0.7), 0.0]


def test_counters_going_back_mean_a_restart_and_the_index_forgets() -> None:
    affinity = Affinity(PrefixIndex(block_tokens=4))
    affinity.dispatched(request(text(1, 2), prompt_tokens=9), "a", 9)
    affinity.observe("a", signals(prefix_cache_queries_total=90, prefix_cache_hits_total=10))
    affinity.observe("a", signals(prefix_cache_queries_total=3, prefix_cache_hits_total=0))
    assert affinity.index.size("a") == 0 and affinity.trust("a") == 1.0
