"""Dark backends (poll down or signals stale): scored with every engine-signal scorer at its
worst value and ranked after every backend with fresh signals, whatever the weights, the
signals and the picker."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from fakes.anchor_ctx import backends, context, signals
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.anchor.pickers.argmax import ArgmaxPicker
from llmroute.anchor.profile import Profile
from llmroute.anchor.registry import Shared, register_builtins
from llmroute.anchor.scorers.health import HealthScorer
from llmroute.anchor.scorers.inflight import InFlightScorer
from llmroute.anchor.scorers.kv_cache import KvCacheScorer
from llmroute.anchor.scorers.queue_depth import QueueDepthScorer
from llmroute.assemble.anchor import build_profile
from llmroute.config import AnchorConfig
from llmroute.types import BackendStats

GIB = 2 ** 30
PROFILE = Profile((), ((QueueDepthScorer(), 0.4), (KvCacheScorer(), 0.3),
                       (InFlightScorer(), 0.2), (HealthScorer(), 0.1)), ArgmaxPicker())


def ids(ranked) -> list[str]:
    return [c.backend.id for c in ranked]


def dark(ctx, *names: str):
    return replace(ctx, snapshot=ctx.snapshot._replace(dark=frozenset(names)))


def test_a_frozen_engine_no_longer_outranks_a_busy_healthy_one():
    # healthy: a queue and a fuller cache; frozen: no fresh signals (stale). Renormalised
    # over in-flight and health alone the frozen one scored 1.0, above the healthy one.
    engines = {"healthy": signals(waiting=3, kv_cache_usage=0.6)}
    stats = {"healthy": BackendStats("healthy", in_flight=2)}
    ctx = context(stats, engines)
    assert ids(PROFILE.rank(ctx, backends("frozen", "healthy")))[0] == "frozen"  # the old bug
    ranked = PROFILE.rank(dark(ctx, "frozen"), backends("frozen", "healthy"))
    assert ids(ranked) == ["healthy", "frozen"]
    by_id = {c.backend.id: c for c in ranked}
    assert by_id["frozen"].score == pytest.approx(0.2 + 0.1)  # engine scorers at 0.0
    assert by_id["frozen"].scores == {"in-flight": 1.0, "health": 1.0}  # what was said


def test_down_with_signals_still_fresh_counts_its_worst():
    # the last poll failed but the last good signals are younger than stale_after_s
    engines = {"a": signals(waiting=0, kv_cache_usage=0.0), "b": signals(waiting=9)}
    totals, parts = PROFILE.score(dark(context(engines=engines), "a"), backends("a", "b"))
    assert parts["queue-depth"]["a"] == 1.0 and parts["kv-cache"]["a"] == 1.0  # as said
    assert totals["a"] == pytest.approx(0.3)  # but counted as 0.0
    assert ids(PROFILE.rank(dark(context(engines=engines), "a"), backends("a", "b"))) == ["b", "a"]


def test_dark_backends_come_last_by_total_and_a_limit_never_reaches_them():
    stats = {"x": BackendStats("x", in_flight=5), "y": BackendStats("y", in_flight=0)}
    ctx = dark(context(stats), "x", "y")
    assert ids(PROFILE.rank(ctx, backends("x", "y", "z"))) == ["z", "y", "x"]
    assert ids(PROFILE.rank(ctx, backends("x", "y", "z"), limit=1)) == ["z"]
    assert ids(PROFILE.rank(ctx, backends("x", "y"))) == ["y", "x"]  # all dark: still served


def test_no_dark_backend_is_the_old_arithmetic():
    engines = {"a": signals(waiting=3)}
    plain = PROFILE.score(context(engines=engines), backends("a", "b"))
    assert PROFILE.score(dark(context(engines=engines), "zzz"), backends("a", "b")) == plain


def test_round_robin_turns_once_per_decision_with_a_dark_backend():
    profile = build_profile(AnchorConfig(scorers={"in-flight": 1.0}, picker="round-robin"),
                            register_builtins(), Shared())
    ctx = dark(context(), "d")
    firsts = [ids(profile.rank(ctx, backends("a", "b", "d")))[0] for _ in range(4)]
    assert firsts == ["a", "b", "a", "b"]


SCORERS = ("queue-depth", "kv-cache", "kv-balance", "free-vram", "gpu-util", "in-flight",
           "latency", "error-rate", "throughput", "health", "expected-ttft")
NAMES = ("a", "b", "c", "d", "e")


def _engine(draw_ints: tuple[int, int, int, int, int]):
    waiting, running, kv, free, util = draw_ints
    return signals(waiting=waiting, running=running, kv_cache_usage=kv / 100,
                   gpu_mem_free_bytes=free * GIB, gpu_mem_used_bytes=(80 - free) * GIB,
                   gpu_util=util / 100)


engine_values = st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 100),
                          st.integers(0, 80), st.integers(0, 100))
stats_values = st.tuples(st.integers(0, 30), st.floats(0.0, 1.0), st.floats(10.0, 5000.0),
                         st.floats(1.0, 200.0))


@settings(max_examples=150, deadline=None)
@given(weights=st.lists(st.floats(-1.0, 1.0).filter(lambda w: abs(w) > 1e-3),
                        min_size=len(SCORERS), max_size=len(SCORERS)),
       picker=st.sampled_from(["argmax", "softmax", "p2c", "round-robin"]),
       rows=st.lists(st.tuples(engine_values, stats_values, st.booleans(), st.booleans()),
                     min_size=2, max_size=len(NAMES)),
       seed=st.integers(0, 2 ** 16))
def test_a_dark_backend_never_ranks_above_a_fresh_one(weights, picker, rows, seed):
    # each row: a backend's engine signals, router stats, whether it is dark, and (when
    # dark) whether its last signals are still in the snapshot (down) or gone (stale)
    names = NAMES[:len(rows)]
    engines, stats, gone = {}, {}, set()
    for name, (eng, (inflight, err, lat, tps), is_dark, kept) in zip(names, rows):
        stats[name] = BackendStats(name, in_flight=inflight, window_error_rate=err,
                                   latency_p95_ms=lat, latency_baseline_ms=100.0,
                                   output_tps=tps, prefill_ms_per_token=0.1)
        if is_dark:
            gone.add(name)
        if not is_dark or kept:
            engines[name] = _engine(eng)
    shared = Shared(rng=random.Random(seed))
    cfg = AnchorConfig(scorers=dict(zip(SCORERS, weights)), picker=picker)
    profile = build_profile(cfg, register_builtins(), shared)
    ctx = dark(context(stats, engines), *gone)
    order = ids(profile.rank(ctx, backends(*names)))
    assert sorted(order) == sorted(names)
    flags = [b in gone for b in order]
    assert flags == sorted(flags), order  # every fresh backend before every dark one
    if len(gone) < len(names):
        assert ids(profile.rank(ctx, backends(*names), limit=1))[0] not in gone
