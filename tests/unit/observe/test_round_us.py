"""``round_us``: a trace's times rounded to the µs, as ``round(ms, 3)`` rounds them."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from llmroute.observe.trace import Step, round4, round_us


@given(st.floats(min_value=-1e7, max_value=1e7))
def test_a_time_keeps_three_decimals_and_the_value_round_gives(ms: float) -> None:
    r = round_us(ms)
    assert abs(r - ms) <= 0.0005 + 1e-12 * abs(ms)
    assert len(repr(r).partition(".")[2]) <= 3
    scaled = abs(ms) * 1000
    tie = abs(scaled - math.floor(scaled) - 0.5) < 1e-6  # the binary value decides a tie
    assert r == round(ms, 3) or tie


def test_a_step_writes_its_times_to_the_microsecond() -> None:
    step = Step("anchor", 1.23449, 0.0004999, {"pool": "p"})
    assert step.to_json() == {"step": "anchor", "start_ms": 1.234, "duration_ms": 0.0,
                              "pool": "p"}


@given(st.one_of(st.floats(allow_nan=False), st.integers(-10**6, 10**6).map(float),
                 st.sampled_from([0.0, -0.0, 1.0, 1e300])))
def test_round4_gives_what_round_to_four_decimals_gives(x: float) -> None:
    r = round4(x)
    assert r == round(x, 4) and type(r) is float
    assert math.copysign(1.0, r) == math.copysign(1.0, round(x, 4))


def test_round4_keeps_nan_as_round_does() -> None:
    assert math.isnan(round4(math.nan))
