"""Circuit breaker transitions over a fake clock (seconds): failure rate over a sliding
window with a minimum number of requests, cool-down, limited half-open probes, Retry-After."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.config import BreakerConfig
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.types import BreakerState, Outcome

F, S = Outcome.FAILURE, Outcome.SUCCESS
CLOSED, OPEN, HALF = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


def breaker(**kw) -> CircuitBreaker:
    return CircuitBreaker(BreakerConfig(**{"window_s": 10, "min_requests": 4,
                                           "failure_rate": 0.5, "cooldown_s": 5, **kw}))


def test_opens_on_rate_once_min_requests_seen_then_half_opens_then_closes():
    b = breaker()
    for t, o in enumerate([F, F, F]):
        b.record("x", o, t)
    assert b.state("x", 2) is CLOSED  # 3 of 3 failed, but fewer than 4 requests
    b.record("x", S, 3)
    assert b.state("x", 3) is OPEN and not b.allow("x", 7.9)  # 3 / 4 ≥ 0.5
    assert b.state("x", 8) is HALF and b.allow("x", 8)
    b.begin("x", 8)
    b.record("x", S, 8.5)
    assert b.state("x", 9) is CLOSED and b.failure_rate("x", 9) == 0.0


def test_rate_below_threshold_stays_closed():
    b = breaker()
    for t, o in enumerate([F, S, S, S, F, S, S]):
        b.record("x", o, t)
    assert b.state("x", 7) is CLOSED
    assert b.failure_rate("x", 7) == pytest.approx(2 / 7)


def test_failures_age_out_of_the_window():
    b = breaker(window_s=10)
    for t in (0, 1, 2):
        b.record("x", F, t)
    for t in (11, 12, 13):  # the early failures are older than 10 s by now
        b.record("x", S, t)
    b.record("x", F, 13.5)
    assert b.state("x", 14) is CLOSED


def test_failed_probe_reopens_for_another_cooldown():
    b = breaker(min_requests=1)
    b.record("x", F, 0)
    assert b.state("x", 5) is HALF
    b.begin("x", 5)
    b.record("x", F, 5)
    assert b.state("x", 9.9) is OPEN
    assert b.state("x", 10) is HALF


def test_half_open_admits_only_the_configured_probes_and_needs_that_many_successes():
    b = breaker(min_requests=1, half_open_probes=2)
    b.record("x", F, 0)
    b.begin("x", 5)
    assert b.allow("x", 5)
    b.begin("x", 5)
    assert not b.allow("x", 5)  # both probe slots taken
    b.record("x", S, 6)
    assert b.state("x", 6) is HALF and b.allow("x", 6)
    b.record("x", S, 6.5)
    assert b.state("x", 7) is CLOSED


def test_retry_after_holds_a_backend_open_then_it_returns():
    b = breaker()
    b.hold("x", 3, 10)
    assert b.state("x", 12.9) is OPEN and not b.allow("x", 12.9)
    assert b.state("x", 13) is CLOSED


@given(st.lists(st.sampled_from([F, S]), max_size=40), st.integers(1, 6),
       st.sampled_from([0.25, 0.5, 1.0]))
def test_opens_exactly_when_the_windowed_rate_reaches_the_threshold(outcomes, min_requests,
                                                                     rate):
    """With a window longer than the run and no cool-down expiry, the breaker opens at the
    first point where ≥ min_requests outcomes are in and the failed fraction ≥ rate."""
    b = CircuitBreaker(BreakerConfig(window_s=1000, min_requests=min_requests,
                                     failure_rate=rate, cooldown_s=1000))
    seen: list[Outcome] = []
    for i, o in enumerate(outcomes):
        seen.append(o)
        b.record("x", o, i)
        failed = seen.count(F)
        should = len(seen) >= min_requests and failed >= rate * len(seen)
        assert (b.state("x", i) is OPEN) == should
        if should:
            break


def test_an_abandoned_probe_frees_its_slot_without_a_verdict():
    b = breaker(min_requests=1)
    b.record("x", F, 0)
    b.begin("x", 5)
    assert not b.allow("x", 5)
    b.release("x")
    assert b.allow("x", 5) and b.state("x", 5) is HALF


def test_flagged_names_opened_and_held_backends_until_they_close():
    b = breaker(half_open_probes=1)
    assert b.flagged == frozenset()
    for t in range(4):
        b.record("x", F, t)
    b.hold("y", 2, 0)
    assert b.flagged == {"x", "y"}
    b.begin("x", 9)
    b.record("x", S, 9)  # the half-open probe succeeds: closed again
    assert b.state("x", 9) is CLOSED and b.flagged == {"y"}


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from([F, S]),
                          st.sampled_from(["record", "hold", "probe"])), max_size=40))
def test_every_backend_outside_flagged_is_closed(events):
    b = breaker(min_requests=2, half_open_probes=1)
    for t, (bid, outcome, kind) in enumerate(events):
        if kind == "hold":
            b.hold(bid, 3, t)
        elif kind == "probe":
            b.begin(bid, t)
            b.record(bid, outcome, t)
        else:
            b.record(bid, outcome, t)
        for other in "abc":
            if other not in b.flagged:
                assert b.state(other, t) is CLOSED


def test_views_are_replaced_on_transitions_only():
    b = breaker(min_requests=1)
    before = b.views()
    b.record("x", S, 0)  # closed and stays closed: nothing to publish
    assert b.views() is before and dict(before) == {}
    b.record("x", F, 1)
    opened = b.views()
    assert opened is not before and dict(before) == {}  # the old view is left as it was
    assert opened["x"].state(5.9) is OPEN and opened["x"].state(6) is HALF
    b.begin("x", 6)
    assert b.views() is not opened and not b.views()["x"].allows(6)  # the probe slot taken
    assert opened["x"].allows(6)
    b.record("x", S, 6.5)
    assert dict(b.views()) == {}


@given(st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from([F, S]),
                          st.sampled_from(["record", "hold", "probe", "release"]),
                          st.floats(0, 3)), max_size=40))
def test_a_view_taken_now_answers_as_the_breaker_does_until_the_next_call(events):
    b = breaker(min_requests=2, half_open_probes=2)
    t = 0.0
    for bid, outcome, kind, step in events:
        t += step
        if kind == "hold":
            b.hold(bid, 3, t)
        elif kind == "probe":
            b.begin(bid, t)
        elif kind == "release":
            b.release(bid)
        else:
            b.record(bid, outcome, t)
        views = b.views()
        for other in "ab":
            view = views.get(other)
            for later in (t, t + 2.5, t + 6):
                state = CLOSED if view is None else view.state(later)
                assert state is b.state(other, later)
                assert (view is None or view.allows(later)) is b.allow(other, later)
