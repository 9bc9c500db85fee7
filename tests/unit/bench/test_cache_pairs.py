"""bench/lib/cache_pairs.py: the swaps and rephrasings bench/cache.py builds, the rates and
the similarity-only threshold matched to a recall."""

from __future__ import annotations

import random

import pytest

from llmroute.cache.anchors import Anchors, differs


@pytest.fixture(scope="module")
def lib(bench_module):
    return bench_module("lib.cache_pairs")


@pytest.mark.parametrize("text", [
    "Walk 3 miles, then 4 miles; on average 3 miles. How far?",
    "Is the capital of France larger than the capital of Spain?",
], ids=["numbers", "names"])
def test_a_swap_changes_an_anchor_and_a_rephrasing_keeps_them(lib, text):
    rng = random.Random(7)
    for _ in range(20):
        swap = lib.swapped(text, rng)
        assert swap != text and differs(Anchors.of(text), Anchors.of(swap)) is not None
        same = lib.rephrased(text, rng)
        assert text in same and differs(Anchors.of(text), Anchors.of(same)) is None


def test_a_text_without_numbers_or_names_has_no_swap(lib):
    assert lib.swapped("explain recursion simply.", random.Random(1)) is None


def test_rates_and_the_threshold_for_a_recall(lib):
    judged = [lib.Judged(1, 0.99, True, ""), lib.Judged(1, 0.95, False, "order"),
              lib.Judged(0, 0.97, False, "order"), lib.Judged(0, 0.90, False, "")]
    assert lib.rates(judged) == (0.0, 0.5)
    t = lib.threshold_for_recall(judged, 0.5)
    assert t == 0.99 and lib.rates(judged, t) == (0.0, 0.5)
    assert lib.rates(judged, 0.95) == (0.5, 1.0)
