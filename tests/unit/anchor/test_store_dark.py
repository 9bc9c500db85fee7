"""The signal store's dark set and per-backend state, and how they reach the snapshot."""

from __future__ import annotations

from fakes.anchor_ctx import signals

from llmroute.anchor.stats.router import RouterStats
from llmroute.anchor.store import SignalStore


def test_dark_is_down_or_stale_never_unpolled():
    store = SignalStore(stale_after_s=2.0)
    store.record_ok("up", signals(taken_at=0.0), 0.0)
    store.record_ok("down", signals(taken_at=0.0), 0.0)
    store.record_failure("down", "timed out", 0.5)  # last signals still fresh
    store.record_failure("never", "connection refused", 0.5)  # no signals ever
    assert store.dark(1.0) == {"down", "never"}
    assert set(store.fresh(1.0)) == {"up", "down"}
    assert store.dark(2.5) == {"up", "down", "never"}  # "up" went stale
    assert "unpolled" not in store.dark(2.5)
    states = {b: store.state(b, t) for b, t in
              [("up", 1.0), ("down", 1.0), ("never", 1.0), ("unpolled", 1.0)]}
    assert states == {"up": "up", "down": "down", "never": "down", "unpolled": "unknown"}
    assert store.state("up", 2.5) == "stale"


def test_dark_follows_new_polls_at_the_same_instant():
    store = SignalStore(stale_after_s=2.0)
    store.record_failure("a", "boom", 1.0)
    assert store.dark(1.0) == {"a"}
    store.record_ok("a", signals(taken_at=1.0), 1.0)
    assert store.dark(1.0) == frozenset()  # the memo is per (now, store version)


def test_the_router_snapshot_carries_the_dark_set():
    store = SignalStore(stale_after_s=2.0)
    store.record_ok("a", signals(taken_at=0.0, waiting=1), 0.0)
    store.record_failure("b", "refused", 0.0)
    stats = RouterStats.for_backends(["a", "b", "c"], store.fresh, None, store.dark)
    snap = stats.snapshot(1.0)
    assert set(snap.engines) == {"a"} and snap.dark == {"b"}
    assert RouterStats.for_backends(["a"]).snapshot(1.0).dark == frozenset()
