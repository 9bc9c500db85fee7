"""bench/faults.py: its stream classification, and a small run over engines that cut,
stall, answer 500, end the body early without a ``finish_reason`` and crawl (the router must
lose no stream, pass no cut answer off as complete, splice every seam exactly and deal with
every crawl)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH / "lib"))
_spec = importlib.util.spec_from_file_location("bench_faults", BENCH / "faults.py")
assert _spec is not None and _spec.loader is not None
faults = sys.modules["bench_faults"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(faults)


def test_a_stream_is_classified_by_what_it_received():
    seen = faults.Seen()
    for line in ['data: {"choices": [{"delta": {"content": "Hi"}, "finish_reason": null}]}',
                 ": keep-alive", 'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}',
                 "data: [DONE]"]:
        faults._absorb(seen, line)
    assert (seen.text, seen.finish, seen.done, seen.error) == ("Hi", "stop", True, False)
    bad = faults.Seen()
    faults._absorb(bad, 'data: {"error": {"message": "gone"}}')
    assert bad.error


async def test_cuts_stalls_500s_and_early_ends_lose_no_stream_and_no_seam_text():
    result = await faults.run(24, seed=3, weights=(0.35, 0.25, 0.1, 0.1, 0.2, 0.15))
    assert result["streams"] == 24 and result["faults_recovered"] > 0
    assert result["upstream_faults"]["end"] > 0 and result["slow_faults"] > 0
    assert result["slow_recovered"] == result["slow_faults"], result
    assert (result["lost_streams"], result["false_complete_streams"],
            result["duplicated_or_missing_seam_text"]) == (0, 0, 0), result
    assert result["p95_recovery_s"] <= result["recovery_target_s"]


def test_recovery_runs_from_the_fault_and_counts_bytes_still_in_flight():
    """A stall struck at t=1.0 while its first chunk was still on the way (it arrived at
    1.05): the recovery is the silence after that chunk (1.05 → 1.6), not the one before;
    a 500 at t=2.1 on a stream asked at 2.0 is timed from the 500 (2.1 → 2.3)."""
    stall = faults.Seen(asked=0.9, arrivals=[1.05, 1.6, 1.61])
    failed = faults.Seen(asked=2.0, arrivals=[2.3, 2.31])
    log = [("stream 0", "stall", 0.9, 1.0), ("stream 1", "500", 2.0, 2.1),
           ("stream 1", "ok", 2.1, None)]
    single, multi = faults._recoveries([stall, failed], log)
    assert [(k, round(r, 3)) for k, r in single] == [("stall", 0.55), ("500", 0.2)]
    assert multi == []


def test_a_crawl_is_timed_to_the_next_backend_s_first_event():
    """A crawl struck at t=1.0 on stream 0; the router handed off after the client had 2
    tokens, so the client's event 2 (at 1.7) is the next backend's first: 0.7 s."""
    crawl = faults.Seen(asked=0.9, arrivals=[0.95, 1.3, 1.7, 1.71], finish="stop", done=True,
                        text=faults.REPLY, handoffs=[{"reason": "slow", "at_token": 2}])
    slow = faults._slow([crawl], [("stream 0", "slow", 0.9, 1.0)])
    assert slow == {"slow_faults": 1, "slow_recovered": 1, "slow_handoffs": 1,
                    "slow_handoffs_unprovoked": 0, "slow_p95_recovery_s": 0.7}
