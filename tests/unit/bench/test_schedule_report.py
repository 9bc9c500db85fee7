"""bench/lib/schedule_report.py: the fleet's GPU-busy fraction from the polled counters, a
goodput sweep's sustained load, the RESULT's ratios."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "lib"))
from schedule_load import Busy, Outcome, Poll  # noqa: E402
from schedule_report import Run, Sweep, result  # noqa: E402


POLLS = [Poll(0.0, [0.1], [1], [0]), Poll(1.0, [0.2], [1], [0])]


def test_gpu_busy_is_the_busy_model_time_over_the_model_time_while_sending():
    # time_scale 0.5: 2 wall s are 4 model s; engine 0 busy 2 of them, engine 1 all 4
    busy = [Busy(0.5, [1.0, 3.0]), Busy(2.5, [3.0, 7.0])]
    run = Run("x", [], POLLS, time_scale=0.5, deadline_s=15.0, busy=busy)
    assert run.gpu_busy() == pytest.approx((0.5 + 1.0) / 2)
    assert math.isnan(Run("x", [], POLLS, 0.5, 15.0, busy[:1]).gpu_busy())


def test_a_sweep_sustains_the_highest_load_that_met_the_target():
    sweep = Sweep("default", 2.0, {0.2: 0.4, 0.6: 1.9, 0.8: 2.6, 1.0: 7.0})
    assert sweep.sustained == 0.6
    assert Sweep("round-robin", 2.0, {0.05: 2.1}).sustained == 0.0


def test_the_ratios_are_the_default_over_round_robin_and_none_without_a_baseline():
    outcomes = [Outcome(i, "ok", 0.1 * (i + 1), 1.0, "gpu-0") for i in range(10)]
    slow = [Outcome(i, "ok", 1.0 * (i + 1), 2.0, "gpu-0") for i in range(10)]
    busy = [Busy(0.0, [0.0]), Busy(1.0, [0.5])]
    runs = [Run("round-robin", slow, POLLS, 1.0, 15.0, busy),
            Run("default", outcomes, POLLS, 1.0, 15.0, busy)]
    sweeps = [Sweep("round-robin", 2.0, {0.1: 1.0, 0.2: 3.0}),
              Sweep("default", 2.0, {0.6: 1.5, 0.8: 2.5})]
    out = result(runs, sweeps, capacity_rps=30.0)
    assert out["p99_ttft_ratio_vs_rr"] == pytest.approx(0.1)
    assert out["goodput_ratio_vs_rr"] == pytest.approx(6.0)
    assert out["goodput_rps"] == {"round-robin": 3.0, "default": 18.0}
    assert out["gpu_busy_default"] == pytest.approx(0.5)
    assert result(runs[1:], sweeps[1:], 30.0)["goodput_ratio_vs_rr"] is None
