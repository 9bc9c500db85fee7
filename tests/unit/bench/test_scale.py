"""bench/scale.py --quick end to end on a real redis-server: its RESULT keys, a fleet of
simulated replicas that keeps ``rpm: 60`` exact, and (``--only outage``) Redis killed under
load on real replicas without a failed request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.redis import MISSING, find_redis_server

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.redis]


def _scale(*args: str) -> dict:
    """``bench/scale.py ARGS``' RESULT (skips without a redis-server)."""
    if find_redis_server() is None:
        pytest.skip(MISSING)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), *args],
                         capture_output=True, text=True, timeout=300, env=env, check=True)
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT ")
    return json.loads(last[len("RESULT "):])


def test_scale_quick_reports_the_redis_cost_and_an_exact_fleet_limit():
    result = _scale("--quick")
    assert result["fleet_rpm_overshoot_max"] <= 1
    assert 0 < result["breaker_propagation_ms_p95"] <= 1000
    assert result["redis_added_p50_ms"] > 0 and set(result["fleet"]) == {"8", "32", "128"}
    assert all(row["redis_ops_per_request"] > 1 for row in result["fleet"].values())
    assert result["redis_outage_requests"] > 0 and "redis_outage_failed_requests" in result


def test_scale_outage_kills_redis_under_load_and_no_request_fails():
    result = _scale("--quick", "--only", "outage")
    phases = result["redis_outage_phases"]
    assert phases["down"]["requests"] > 0 and phases["after"]["requests"] > 0, phases
    assert result["redis_outage_requests"] == sum(p["requests"] for p in phases.values())
    assert result["redis_outage_failed_requests"] == 0, phases
    assert all(r == {"llmroute_state_up": 1.0, "llmroute_state_outages_total": 1.0}
               for r in result["redis_outage_replicas"].values()), result
