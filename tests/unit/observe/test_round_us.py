"""``round_us``: a trace's times rounded to the µs, as ``round(ms, 3)`` rounds them."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from llmroute.observe.trace import Step, round_us


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
