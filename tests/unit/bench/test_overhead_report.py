"""bench/lib/overhead_report.py: how the overhead benchmark turns its interleaved rounds
into the throughput ratios its targets read."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SIXTEEN = ("closed", 16)


def _report():
    pytest.importorskip("rich")
    spec = importlib.util.spec_from_file_location(
        "bench_overhead_report", ROOT / "bench" / "lib" / "overhead_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(rps: list[float], seconds: float = 1.5) -> dict:
    """A cell as ``overhead.measure`` leaves it: one segment of ``seconds`` per round."""
    latencies = [1.0] * sum(round(r * seconds) for r in rps)
    return {"latencies_ms": latencies, "errors": 0, "chunks": 0, "cpu_s": 0.1,
            "served": len(latencies), "chunks_all": 0, "duration_s": seconds * len(rps),
            "round_rps": rps}


def _rows(**cells: dict) -> dict:
    report = _report()
    return report.summarise({(name.replace("_", "-"), SIXTEEN, False): c
                             for name, c in {"direct": _cell([3000.0] * 5), **cells}.items()})


def test_one_slow_pair_of_segments_does_not_move_the_ratio():
    # rounds 1-4: policies runs at 0.9x llmroute; in round 5 the machine stalled
    # during the policies segment only
    rows = _rows(llmroute=_cell([2000.0, 1800.0, 2100.0, 1900.0, 2000.0]),
                 llmroute_policies=_cell([1800.0, 1620.0, 1890.0, 1710.0, 900.0]))
    ratio = _report().paired_ratio(rows, "llmroute-policies", "llmroute", SIXTEEN)
    assert ratio == pytest.approx(0.9)
    pooled = rows[("llmroute-policies", SIXTEEN, False)]["rps"] / \
        rows[("llmroute", SIXTEEN, False)]["rps"]
    assert pooled < 0.82  # what pooling the rounds said of the same segments


def test_a_drift_that_hits_both_paths_of_a_round_cancels_out():
    slow = [2000.0, 1000.0, 2000.0, 1000.0, 2000.0]
    rows = _rows(llmroute=_cell(slow), llmroute_observed=_cell([r * 0.95 for r in slow]))
    assert _report().paired_ratio(rows, "llmroute-observed", "llmroute",
                                  SIXTEEN) == pytest.approx(0.95)


def test_paths_measured_in_different_numbers_of_rounds_compare_pooled_rates():
    rows = _rows(llmroute=_cell([2000.0, 2000.0, 2000.0, 2000.0, 2000.0]),
                 litellm=_cell([100.0]))
    assert _report().paired_ratio(rows, "llmroute", "litellm", SIXTEEN) == pytest.approx(20.0)
