"""bench/lib/schedule_report.py: the fleet's GPU-busy fraction from the polled counters, a
goodput sweep's sustained load, the RESULT's ratios."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "lib"))
from schedule_load import Busy, FirstTokens, Outcome, Poll, first_tokens  # noqa: E402
from schedule_report import Probe, Run, Sweep, result  # noqa: E402


POLLS = [Poll(0.0, [0.1], [1], [0]), Poll(1.0, [0.2], [1], [0])]


def test_gpu_busy_is_the_busy_model_time_over_the_model_time_while_sending():
    # time_scale 0.5: 2 wall s are 4 model s; engine 0 busy 2 of them, engine 1 all 4
    busy = [Busy(0.5, [1.0, 3.0]), Busy(2.5, [3.0, 7.0])]
    run = Run("x", [], POLLS, time_scale=0.5, deadline_s=15.0, busy=busy)
    assert run.gpu_busy() == pytest.approx((0.5 + 1.0) / 2)
    assert math.isnan(Run("x", [], POLLS, 0.5, 15.0, busy[:1]).gpu_busy())


def test_a_sweep_sustains_the_highest_load_whose_engines_met_the_target_for_95_percent():
    # the client's P95 (second figure) does not decide: the engines' share does
    sweep = Sweep("default", 2.5, {0.2: Probe(1.0, 0.4), 0.6: Probe(0.95, 9.0),
                                   0.8: Probe(0.94, 2.0), 1.0: Probe(0.5, 7.0)})
    assert sweep.sustained == 0.6
    assert Sweep("round-robin", 2.5, {0.05: Probe(0.9, 1.0)}).sustained == 0.0


def histogram(within_1: int, within_2_5: int, count: int) -> str:
    """One engine's ``/metrics`` TTFT histogram as the emulator renders it."""
    name = "vllm:time_to_first_token_seconds"
    return (f"# HELP {name} Histogram of time to first token in seconds.\n"
            f"# TYPE {name} histogram\n"
            f'{name}_bucket{{engine="0",le="1.0"}} {within_1}.0\n'
            f'{name}_bucket{{engine="0",le="2.5"}} {within_2_5}.0\n'
            f'{name}_bucket{{engine="0",le="+Inf"}} {count}.0\n'
            f'{name}_count{{engine="0"}} {count}.0\n'
            f'{name}_sum{{engine="0"}} 12.0\n')


def test_the_fleets_first_tokens_are_summed_and_a_request_without_one_counts_as_late():
    first = first_tokens([histogram(3, 8, 9), histogram(1, 2, 4), ""])
    assert first == FirstTokens({1.0: 4, 2.5: 10}, 13)
    # 15 requests sent, 13 had a first token at an engine, 10 of them within 2.5 s
    run = Run("x", [Outcome(i, "ok", 0.1, 1.0, "gpu-0") for i in range(15)], POLLS, 1.0,
              15.0, first_tokens=first)
    assert run.engine_within(2.5) == pytest.approx(10 / 15)
    assert math.isnan(Run("x", [], POLLS, 1.0, 15.0).engine_within(2.5))


def test_the_ratios_are_the_default_over_round_robin_and_none_without_a_baseline():
    outcomes = [Outcome(i, "ok", 0.1 * (i + 1), 1.0, "gpu-0") for i in range(10)]
    slow = [Outcome(i, "ok", 1.0 * (i + 1), 2.0, "gpu-0") for i in range(10)]
    busy = [Busy(0.0, [0.0]), Busy(1.0, [0.5])]
    runs = [Run("round-robin", slow, POLLS, 1.0, 15.0, busy),
            Run("default", outcomes, POLLS, 1.0, 15.0, busy)]
    sweeps = [Sweep("round-robin", 2.5, {0.1: Probe(0.96, 1.0), 0.2: Probe(0.6, 3.0)}),
              Sweep("default", 2.5, {0.6: Probe(0.99, 1.5), 0.8: Probe(0.9, 2.5)})]
    out = result(runs, sweeps, capacity_rps=30.0)
    assert out["p99_ttft_ratio_vs_rr"] == pytest.approx(0.1)
    assert out["goodput_ratio_vs_rr"] == pytest.approx(6.0)
    assert out["goodput_rps"] == {"round-robin": 3.0, "default": 18.0}
    assert out["gpu_busy_default"] == pytest.approx(0.5)
    assert result(runs[1:], sweeps[1:], 30.0)["goodput_ratio_vs_rr"] is None
