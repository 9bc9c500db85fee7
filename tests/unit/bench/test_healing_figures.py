"""bench/healing.py's figures from a replay's outcomes: which requests went to the degraded
engine after it went bad, how soon it was demoted, the hot GPU's share while it read above
78 °C, and the fleet's P95 TTFT after the link slowed — measured from the load's real start
when it began late."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "lib"))
from schedule_load import Outcome  # noqa: E402


@pytest.fixture(scope="module")
def healing(bench_module):
    return bench_module("healing")


def arm(healing, late_s: float = 0.0):
    plan = healing.Plan([(float(t), 100, 10) for t in range(20)], time_scale=0.5,
                        degrade_s=10.0, slow_s=5.0)
    a = healing.Arm("self-healing", plan, fleet_at=100.0,
                    start_at=100.0 + healing.LEAD_S + late_s)
    backends = ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    a.outcomes = [Outcome(i, "ok", 0.1 * (1 + (i % 4 == 2)), 1.0, backends[i % 4])
                  for i in range(20)]
    return a


def test_bad_answers_and_time_to_demote_count_from_the_degradation(healing):
    a = arm(healing)
    assert healing.bad_answers(a) == 2  # gpu-0 gets t = 0, 4, 8, 12, 16; bad from t = 10
    a.moves = [(a.start_at + 14.5, "gpu-0", "cut"), (a.start_at + 3.0, "gpu-3", "cut"),
               (a.start_at + 4.0, "gpu-3", "ejected"), (a.start_at + 40.0, "gpu-3", "probing"),
               (a.start_at + 50.0, "gpu-3", "healthy"), (a.start_at + 60.0, "gpu-3", "ejected")]
    assert healing.time_to_demote(a) == pytest.approx(4.5)
    assert healing.demotions(a, but="gpu-0") == 2  # a cut; later, ejected straight away


def test_a_late_load_start_moves_every_cue_earlier_on_its_clock(healing):
    a = arm(healing, late_s=4.0)
    assert a.cue(10.0) == pytest.approx(6.0)
    assert healing.bad_answers(a) == 3  # bad from t = 6 on that clock: 8, 12, 16


def test_the_hot_share_counts_requests_between_two_hot_readings(healing):
    a = arm(healing)
    a.temps = [(0.0, 70.0), (3.5, 79.0), (8.5, 80.0), (9.5, 76.0)]
    share, sent = healing.hot_share(a)
    assert sent == 5 and share == pytest.approx(1 / 5)  # t = 4 … 8; gpu-1 at t = 5


def test_the_p95_after_the_slow_link_is_in_model_seconds(healing):
    share, p95 = healing.slow_link(arm(healing))
    assert share == pytest.approx(4 / 15) and p95 == pytest.approx(0.4)
