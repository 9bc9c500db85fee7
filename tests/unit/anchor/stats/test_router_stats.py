"""Router-side stats: EWMAs kept, sliding-window p95, baseline, error rate, output tokens/s."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.anchor.stats.router import WINDOW_S, RouterStats, nearest_rank
from llmroute.types import BackendStats, BreakerView


@pytest.mark.parametrize("values,q,expected", [
    ([], 0.95, None), ([5.0], 0.95, 5.0), (list(range(1, 21)), 0.95, 19),
    (list(range(1, 101)), 0.95, 95), ([3.0, 1.0, 2.0], 0.5, 2.0)],
    ids=["empty", "one", "twenty", "hundred", "unsorted-median"])
def test_nearest_rank(values, q, expected):
    assert nearest_rank(values, q) == expected


def test_a_backend_without_requests_publishes_the_default_stats():
    assert RouterStats.for_backends(["a"]).snapshot(0.0).stats["a"] == BackendStats("a")


def test_in_flight_and_ewma_still_work():
    s = RouterStats.for_backends(["a"])
    s.sent("a", 1, 0.0)
    s.sent("a", 1, 0.0)
    assert s.snapshot(0.0).stats["a"].in_flight == 2
    s.finished("a", 1.0, ok=True, latency_ms=100.0, ttft_ms=10.0)
    s.finished("a", 1.0, ok=True, latency_ms=200.0, ttft_ms=20.0)
    a = s.snapshot(1.0).stats["a"]
    assert a.in_flight == 0
    assert a.latency_ms == pytest.approx(120.0)
    assert a.ttft_ms == pytest.approx(12.0)


def test_window_p95_baseline_error_rate_and_tps():
    s = RouterStats.for_backends(["a"])
    for i in range(1, 21):  # TTFT 10..200 ms, e2e = TTFT + 1000 ms, 50 tokens each
        s.sent("a", 1, float(i))
        s.finished("a", float(i), ok=True, latency_ms=10.0 * i + 1000, ttft_ms=10.0 * i,
                   output_tokens=50)
    s.sent("a", 1, 21.0)
    s.finished("a", 21.0, ok=False)
    a = s.snapshot(21.0).stats["a"]
    assert a.ttft_p95_ms == 190.0
    assert a.latency_p95_ms == 1190.0
    assert a.window_requests == 21
    assert a.window_error_rate == pytest.approx(1 / 21)
    assert a.output_tps == pytest.approx(50.0)  # 50 tokens per 1.0 s of generation
    assert a.ttft_baseline_ms == 30.0  # p50 of the first five samples (10..50 ms)


def test_window_forgets_old_samples_but_baseline_stays():
    s = RouterStats.for_backends(["a"])
    for i in range(5):
        s.finished("a", float(i), ok=True, latency_ms=100.0, ttft_ms=10.0)
    later = WINDOW_S + 10
    s.finished("a", later, ok=True, latency_ms=900.0, ttft_ms=500.0)
    a = s.snapshot(later).stats["a"]
    assert a.window_requests == 1
    assert a.ttft_p95_ms == 500.0
    assert a.ttft_baseline_ms == 10.0


def test_snapshot_attaches_fresh_engine_signals():
    s = RouterStats.for_backends(["a"], engines=lambda now: {"a": f"signals@{now}"})
    assert s.snapshot(3.0).engines == {"a": "signals@3.0"}


def test_snapshot_takes_the_breaker_views_as_they_are():
    views = {"a": BreakerView(opened_at=1.0, cooldown_s=5.0)}
    s = RouterStats.for_backends(["a"], breakers=lambda: views)
    assert s.snapshot(3.0).breakers is views
    assert RouterStats.for_backends(["a"]).snapshot(3.0).breakers == {}


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 1e5), st.floats(0, 1e5),
                          st.integers(0, 4000)), max_size=60))
def test_window_invariants(events):
    s = RouterStats.for_backends(["a"])
    for i, (ok, lat, ttft, tokens) in enumerate(events):
        s.sent("a", 1, float(i))
        s.finished("a", float(i), ok=ok, latency_ms=lat + ttft, ttft_ms=ttft,
                   output_tokens=tokens)
    a = s.snapshot(float(len(events))).stats["a"]
    assert a.in_flight == 0
    assert a.window_error_rate is None or 0.0 <= a.window_error_rate <= 1.0
    assert a.output_tps is None or a.output_tps >= 0
    if a.ttft_baseline_ms is not None:
        assert a.ttft_baseline_ms <= max(t for ok, _, t, _ in events if ok)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 50),
                          st.integers(0, 5000)), max_size=6),
       st.lists(st.sampled_from(["a", "b"]), max_size=8))
def test_remote_load_adds_to_the_published_counts_and_nothing_else(remote, sends):
    """The other replicas' (in-flight, prefill) sum into the published stats of tracked
    backends only; this process's own counts (``local_load``) are untouched, and clearing
    the remote load gives back exactly the local view."""
    stats = RouterStats.for_backends(["a", "b"])
    for i, b in enumerate(sends):
        stats.sent(b, 10, float(i))
    local = stats.snapshot(100.0).stats
    load = {b: (n, p) for b, n, p in remote}
    stats.set_remote(load)
    fleet = stats.snapshot(100.0).stats
    for b in ("a", "b"):
        n, p = load.get(b, (0, 0))
        assert fleet[b].in_flight == local[b].in_flight + n
        assert fleet[b].prefill_tokens == local[b].prefill_tokens + p
    assert "c" not in fleet
    assert stats.local_load() == {b: (s.in_flight, s.prefill_tokens) for b, s in local.items()}
    stats.set_remote({})
    assert stats.snapshot(100.0).stats == local


def test_inherit_copies_what_was_learned_but_not_the_old_requests_in_flight():
    old = RouterStats.for_backends(["a", "gone"])
    for i in range(1, 8):
        old.sent("a", 100, float(i))
        old.prefill_ended(old.sent("a", 100, float(i)), float(i) + 0.05, first_token=True)
        old.finished("a", float(i), ok=True, latency_ms=100.0 * i, ttft_ms=10.0 * i,
                     output_tokens=20)
    old.sent("a", 50, 8.0)  # still running on the old runtime
    new = RouterStats.for_backends(["a", "added"])
    new.inherit(old, ["a", "gone", "added"])
    a, learned = new.snapshot(8.0).stats["a"], old.snapshot(8.0).stats["a"]
    assert a.in_flight == 0 and a.prefill_tokens == 0
    assert learned.in_flight > 0
    for field in ("latency_ms", "ttft_ms", "error_rate", "ttft_p95_ms", "latency_p95_ms",
                  "ttft_baseline_ms", "latency_baseline_ms", "window_requests", "output_tps",
                  "prefill_ms_per_token", "prefill_overhead_ms"):
        assert getattr(a, field) == getattr(learned, field), field
    assert a.window_requests == 7
    assert new.snapshot(8.0).stats["added"] == BackendStats("added")
    old.finished("a", 9.0, ok=False)  # the old runtime's records stay its own
    assert new.snapshot(9.0).stats["a"].window_requests == 7
    new.finished("a", 9.0, ok=True, latency_ms=50.0, ttft_ms=5.0)
    assert old.snapshot(9.0).stats["a"].window_requests == 8
    assert new.snapshot(9.0).stats["a"].window_requests == 8
