"""bench/router_value.py's measures on a table small enough to work out by hand: the
quality curve when the least likely weak wins go strong first, the cut at 95 % of
always-strong quality, APGR, random routing's and the oracle's cuts."""

from __future__ import annotations

import numpy as np
import pytest

QUALITY = np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0]])  # weak 0.5, strong 1


def test_a_perfect_ranking_cuts_half_the_strong_calls(bench_module):
    rv = bench_module("router_value")
    p = np.array([0.9, 0.1, 0.8, 0.2])  # the two rows the weak model fails rank lowest
    assert rv.curve(p, QUALITY).tolist() == [0.5, 0.75, 1.0, 1.0, 1.0]
    s = rv.scores(p, QUALITY)
    assert s["cut"] == 0.5 and s["oracle_cut"] == 0.5
    assert s["random_cut"] == 0.0  # 0.95 needs a 0.9 share at random: the next step is all
    assert s["apgr"] == pytest.approx((0 + 0.5 + 1 + 1 + 1) / 5)


def test_a_backwards_ranking_saves_nothing(bench_module):
    rv = bench_module("router_value")
    s = rv.scores(np.array([0.1, 0.9, 0.2, 0.8]), QUALITY)
    assert s["cut"] == 0.0 and s["apgr"] == pytest.approx((0 + 0 + 0 + 0.5 + 1) / 5)
    assert rv.cut_at(np.array([0.1, 0.2]), 0.5) == 0.0  # never reached: nothing saved
