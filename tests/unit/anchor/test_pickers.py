"""Pickers: every one returns each key once; argmax is deterministic; p2c, softmax and
round-robin are pure functions of their injected state."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.anchor.pickers.argmax import ArgmaxPicker
from llmroute.anchor.pickers.p2c import P2cPicker
from llmroute.anchor.pickers.round_robin import RoundRobinPicker, Turn
from llmroute.anchor.pickers.softmax import SoftmaxPicker

SCORES = {"a": 0.2, "b": 0.9, "c": 0.5, "d": 0.9}


def test_argmax_orders_by_score_and_breaks_ties_by_given_order():
    assert ArgmaxPicker().pick(SCORES) == ["b", "d", "c", "a"]


def test_p2c_puts_the_better_of_two_first_and_the_rest_by_score():
    picker = P2cPicker(random.Random(1))
    firsts = Counter()
    for _ in range(400):
        order = picker.pick(SCORES)
        pair, rest = order[:2], order[2:]
        assert SCORES[pair[0]] >= SCORES[pair[1]]
        assert rest == sorted(rest, key=lambda b: -SCORES[b])
        firsts[order[0]] += 1
    assert firsts["a"] == 0  # the worst can never win a pair
    assert firsts["b"] > 0 and firsts["d"] > 0 and firsts["c"] > 0


def test_p2c_is_reproducible_with_the_same_seed():
    assert [P2cPicker(random.Random(7)).pick(SCORES) for _ in range(3)] == \
        [P2cPicker(random.Random(7)).pick(SCORES) for _ in range(3)]


@pytest.mark.parametrize("temperature,expect_share", [(0.01, 0.99), (100.0, 0.4)],
                         ids=["cold-near-argmax", "hot-near-uniform"])
def test_softmax_temperature(temperature, expect_share):
    picker = SoftmaxPicker(random.Random(3), temperature)
    firsts = Counter(picker.pick({"x": 1.0, "y": 0.0})[0] for _ in range(2000))
    share = firsts["x"] / 2000
    assert share >= expect_share if temperature < 1 else share <= 1 - expect_share


def test_softmax_matches_the_softmax_probability():
    picker = SoftmaxPicker(random.Random(5), temperature=0.5)
    firsts = Counter(picker.pick({"x": 0.5, "y": 0.0})[0] for _ in range(4000))
    # P(x) = e^1 / (e^1 + e^0) ≈ 0.731
    assert firsts["x"] / 4000 == pytest.approx(0.731, abs=0.03)


def test_softmax_rejects_a_non_positive_temperature():
    with pytest.raises(ValueError):
        SoftmaxPicker(random.Random(), 0.0)


def test_round_robin_rotates_and_ignores_scores():
    picker = RoundRobinPicker(Turn())
    orders = [picker.pick(SCORES) for _ in range(5)]
    assert [o[0] for o in orders] == ["a", "b", "c", "d", "a"]
    assert orders[1] == ["b", "c", "d", "a"]


PICKERS = [ArgmaxPicker(), P2cPicker(random.Random(0)), SoftmaxPicker(random.Random(0), 0.1),
           RoundRobinPicker(Turn())]


@pytest.mark.parametrize("picker", PICKERS, ids=["argmax", "p2c", "softmax", "round-robin"])
@given(st.dictionaries(st.text(min_size=1, max_size=4), st.floats(-1, 2), min_size=1))
def test_every_picker_returns_a_permutation(picker, scored):
    order = picker.pick(scored)
    assert sorted(order) == sorted(scored)
