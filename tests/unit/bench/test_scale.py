"""bench/scale.py --quick end to end on a real redis-server: its RESULT keys, and a fleet
of simulated replicas that keeps ``rpm: 60`` exact."""

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


def test_scale_quick_reports_the_redis_cost_and_an_exact_fleet_limit():
    if find_redis_server() is None:
        pytest.skip(MISSING)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--quick"],
                         capture_output=True, text=True, timeout=300, env=env, check=True)
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT ")
    result = json.loads(last[len("RESULT "):])
    assert result["fleet_rpm_overshoot_max"] <= 1
    assert 0 < result["breaker_propagation_ms_p95"] <= 1000
    assert result["redis_added_p50_ms"] > 0 and set(result["fleet"]) == {"8", "32", "128"}
    assert all(row["redis_ops_per_request"] > 1 for row in result["fleet"].values())
