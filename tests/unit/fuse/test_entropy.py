"""The entropy estimator (a lower bound from top-k logprobs, nats) and the run trigger."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.config import EntropyConfig
from llmroute.fuse.entropy import chunk_entropies, entropy_nats
from llmroute.fuse.monitor import Fuse
from llmroute.types import StreamEvent


@pytest.mark.parametrize(("probs", "expected"), [
    ([1.0], 0.0),
    ([0.5], math.log(2)),                      # k = 1: the argmax's surprisal
    ([0.25] * 4, math.log(4)),                 # all mass known: exact entropy
    ([0.5, 0.25], 0.5 * math.log(2) + 0.25 * math.log(4) + 0.25 * math.log(4)),
    ([0.02] * 5, math.log(50)),                # flat: tail at the same level
], ids=["certain", "k1", "uniform4", "tail-at-floor", "flat"])
def test_known_values(probs, expected):
    assert entropy_nats([math.log(p) for p in probs]) == pytest.approx(expected)


def test_empty_is_an_error():
    with pytest.raises(ValueError):
        entropy_nats([])


@given(st.lists(st.floats(0.001, 1.0), min_size=2, max_size=60), st.integers(1, 20))
def test_never_exceeds_the_true_entropy_of_the_full_distribution(weights, k):
    total = sum(weights)
    probs = sorted((w / total for w in weights), reverse=True)
    true = -sum(p * math.log(p) for p in probs)
    estimate = entropy_nats([math.log(p) for p in probs[:k]])
    assert 0.0 <= estimate <= true + 1e-9


@given(st.lists(st.floats(0.001, 1.0), min_size=2, max_size=60), st.integers(1, 19))
def test_more_alternatives_never_lower_the_bound(weights, k):
    total = sum(weights)
    lps = sorted((math.log(w / total) for w in weights), reverse=True)
    assert entropy_nats(lps[:k + 1]) >= entropy_nats(lps[:k]) - 1e-9


def test_chunk_entropies_read_the_openai_shape():
    choice = {"delta": {"content": "a"}, "logprobs": {"content": [
        {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": 0.0}]},
        {"token": "b", "logprob": -0.7, "top_logprobs": [{"token": "b", "logprob": -0.7}]}]}}
    assert chunk_entropies({"choices": [choice]}) == pytest.approx((0.0, 0.7))
    assert chunk_entropies({"choices": [{"delta": {"content": "a"}}]}) == ()
    assert chunk_entropies({"choices": []}) == ()


entropies = st.lists(st.floats(0.0, 8.0), max_size=40)


def fires(hs: list[float], threshold: float, run: int) -> int | None:
    """Index of the token at which the fuse hands off, or None."""
    fuse = Fuse(EntropyConfig(threshold_nats=threshold, run_tokens=run))
    for i, h in enumerate(hs):
        if fuse.observe(StreamEvent((h,))).handoff:
            return i
    return None


@given(entropies, st.floats(0.1, 6.0), st.integers(1, 8))
def test_never_fires_before_run_tokens_tokens(hs, threshold, run):
    at = fires(hs, threshold, run)
    assert at is None or at + 1 >= run
    if at is not None:
        assert all(h > threshold for h in hs[at + 1 - run: at + 1])


@given(entropies, st.floats(0.1, 6.0), st.floats(0.0, 2.0), st.integers(1, 8))
def test_a_lower_threshold_fires_no_later(hs, threshold, less, run):
    high, low = fires(hs, threshold, run), fires(hs, max(threshold - less, 0.05), run)
    if high is not None:
        assert low is not None and low <= high


@given(entropies, st.floats(0.1, 6.0), st.integers(1, 7))
def test_a_longer_run_fires_no_earlier(hs, threshold, run):
    short, long = fires(hs, threshold, run), fires(hs, threshold, run + 1)
    if long is not None:
        assert short is not None and short <= long


def test_failures_hand_off_even_when_disarmed():
    verdict = Fuse(None).observe(StreamEvent(failure="stall"))
    assert verdict.handoff and verdict.reason == "stall"
    assert not Fuse(None).observe(StreamEvent((9.0,) * 10)).handoff


def test_suspect_while_a_high_entropy_run_lasts():
    fuse = Fuse(EntropyConfig(threshold_nats=1.0, run_tokens=3))
    seen = []
    for h in (0.1, 2.0, 2.0, 0.5, 2.0):
        fuse.observe(StreamEvent((h,)))
        seen.append(fuse.suspect)
    assert seen == [False, True, True, False, True]
    assert not Fuse(None).suspect
