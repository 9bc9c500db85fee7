"""Circuit breaker transitions over a fake clock (seconds)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmroute.config import BreakerConfig
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.types import BreakerState, Outcome

F, S = Outcome.FAILURE, Outcome.SUCCESS


def test_opens_after_threshold_then_half_opens_then_closes():
    b = CircuitBreaker(BreakerConfig(failure_threshold=3, cooldown_s=10))
    for t in (0, 1):
        b.record("x", F, t)
        assert b.state("x", t) is BreakerState.CLOSED
    b.record("x", F, 2)
    assert b.state("x", 2) is BreakerState.OPEN and not b.allow("x", 11.9)
    assert b.state("x", 12) is BreakerState.HALF_OPEN and b.allow("x", 12)
    b.record("x", S, 12.5)
    assert b.state("x", 13) is BreakerState.CLOSED


def test_failed_probe_reopens_for_another_cooldown():
    b = CircuitBreaker(BreakerConfig(failure_threshold=1, cooldown_s=5))
    b.record("x", F, 0)
    assert b.state("x", 5) is BreakerState.HALF_OPEN
    b.record("x", F, 5)
    assert b.state("x", 9.9) is BreakerState.OPEN
    assert b.state("x", 10) is BreakerState.HALF_OPEN


def test_success_resets_the_consecutive_count():
    b = CircuitBreaker(BreakerConfig(failure_threshold=2, cooldown_s=5))
    b.record("x", F, 0)
    b.record("x", S, 1)
    b.record("x", F, 2)
    assert b.state("x", 2) is BreakerState.CLOSED


@given(st.lists(st.sampled_from([F, S]), max_size=40), st.integers(1, 5))
def test_open_only_after_threshold_consecutive_failures(outcomes, threshold):
    b = CircuitBreaker(BreakerConfig(failure_threshold=threshold, cooldown_s=1000))
    run = 0
    for i, o in enumerate(outcomes):
        was_open = b.state("x", i) is BreakerState.OPEN
        b.record("x", o, i)
        run = 0 if o is S else run + 1
        if not was_open:
            assert (b.state("x", i) is BreakerState.OPEN) == (run >= threshold)
