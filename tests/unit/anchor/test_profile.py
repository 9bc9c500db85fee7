"""Anchor profile: filters, weighted scorers in [0, 1], negative weights as penalties on the
complement, renormalisation over the signals present, deterministic argmax ties."""

from __future__ import annotations

import pytest
from fakes.anchor_ctx import backends, context, request, signals
from hypothesis import given
from hypothesis import strategies as st

from llmroute.anchor.filters.context_fit import ContextFitFilter
from llmroute.anchor.pickers.argmax import ArgmaxPicker
from llmroute.assemble.anchor import build_profile
from llmroute.anchor.profile import Profile, contribution
from llmroute.anchor.registry import Shared, register_builtins
from llmroute.anchor.scorers.inflight import InFlightScorer
from llmroute.anchor.scorers.queue_depth import QueueDepthScorer
from llmroute.config import AnchorConfig
from llmroute.types import Backend, BackendStats

BACKENDS = [Backend(i, "p", "vllm", "http://x", "m", ctx)
            for i, ctx in [("a", 2048), ("b", 2048), ("c", 8192)]]
PROFILE = Profile((ContextFitFilter(),), ((InFlightScorer(), 0.6), (QueueDepthScorer(), 0.4)),
                  ArgmaxPicker())


def ids(ranked) -> list[str]:
    return [c.backend.id for c in ranked]


def test_idle_ties_keep_config_order():
    assert ids(PROFILE.rank(context(), BACKENDS)) == ["a", "b", "c"]


def test_busier_backend_goes_last():
    stats = {"a": BackendStats("a", in_flight=3), "b": BackendStats("b", in_flight=1)}
    assert ids(PROFILE.rank(context(stats), BACKENDS)) == ["c", "b", "a"]


def test_context_fit_drops_small_backends():
    ranked = PROFILE.rank(context(req=request(prompt_tokens=1900, max_tokens=400)), BACKENDS)
    assert ids(ranked) == ["c"]


def test_missing_signal_renormalises_instead_of_counting_as_zero():
    # b has no engine signals: scored on in-flight alone (1.0), renormalised to the full
    # weight; a has a long queue. b must win, c (short queue, idle) ties b and comes after.
    engines = {"a": signals(waiting=9), "c": signals(waiting=0)}
    ranked = PROFILE.rank(context(engines=engines), BACKENDS)
    by_id = {c.backend.id: c for c in ranked}
    assert by_id["b"].score == pytest.approx(1.0)
    assert by_id["b"].scores == {"in-flight": 1.0}
    assert by_id["a"].score == pytest.approx(0.6 + 0.4 * 0.1)
    assert ids(ranked) == ["b", "c", "a"]


def test_stale_signals_do_not_make_the_choice_random():
    # Only router-side in-flight is known: the least busy still wins, every time.
    stats = {"a": BackendStats("a", in_flight=2), "b": BackendStats("b", in_flight=0),
             "c": BackendStats("c", in_flight=1)}
    assert {ids(PROFILE.rank(context(stats), BACKENDS))[0] for _ in range(20)} == {"b"}


def test_a_backend_with_no_signal_at_all_gets_the_neutral_midpoint():
    profile = Profile((), ((QueueDepthScorer(), 0.5), (QueueDepthScorer(), -0.1)),
                      ArgmaxPicker())
    totals, _ = profile.score(context(), backends("x"))
    assert totals["x"] == pytest.approx((0.5 - 0.1) / 2)


@pytest.mark.parametrize("weight,score,expected", [
    (0.4, 1.0, 0.4), (0.4, 0.25, 0.1), (-0.1, 1.0, 0.0), (-0.1, 0.0, -0.1),
    (-0.1, 0.75, -0.025), (0.3, 7.0, 0.3), (0.3, -2.0, 0.0)],
    ids=["pos-full", "pos-quarter", "neg-best", "neg-worst", "neg-partial", "clamp-high",
         "clamp-low"])
def test_contribution(weight, score, expected):
    assert contribution(weight, score) == pytest.approx(expected)


def _profile(preset: str) -> Profile:
    return build_profile(AnchorConfig(preset=preset), register_builtins(), Shared())


def test_seed_000_is_the_seed_formula_exactly():
    # 0.4 free VRAM + 0.3 idle GPU + 0.2 network − 0.1 queue, queue = 1 − 1/(1+waiting);
    # network = ½ · best RTT / own RTT + ½ · own bytes/s / best bytes/s over the candidates.
    gib = 2 ** 30
    engines = {"a": signals(gpu_mem_free_bytes=60 * gib, gpu_mem_used_bytes=20 * gib,
                            gpu_util=0.4, waiting=3, net_rtt_ms=8.0, net_bytes_per_s=1e6),
               "b": signals(gpu_mem_free_bytes=20 * gib, gpu_mem_used_bytes=60 * gib,
                            gpu_util=0.0, waiting=0, net_rtt_ms=2.0, net_bytes_per_s=4e6)}
    stats = {"a": BackendStats("a", ttft_p95_ms=400.0, ttft_baseline_ms=100.0)}
    totals, _ = _profile("seed-000").score(context(stats, engines), backends("a", "b"))
    net = 0.5 * (1.5 * 2.0 / 8.0) + 0.5 * (1.5 * 1e6 / 4e6)  # within 1.5× of the best: 1.0
    assert totals["a"] == pytest.approx(0.4 * 0.75 + 0.3 * 0.6 + 0.2 * net - 0.1 * (1 - 1 / 4))
    assert totals["b"] == pytest.approx(0.4 * 0.25 + 0.3 * 1.0 + 0.2 * 1.0 - 0.0)


def test_seed_001_is_the_seed_formula_exactly():
    gib = 2 ** 30
    engines = {"a": signals(gpu_mem_free_bytes=30 * gib, gpu_mem_used_bytes=10 * gib),
               "b": signals(gpu_mem_free_bytes=10 * gib, gpu_mem_used_bytes=30 * gib)}
    stats = {"a": BackendStats("a", latency_p95_ms=200.0, latency_baseline_ms=100.0,
                               window_error_rate=0.1, output_tps=50.0),
             "b": BackendStats("b", latency_p95_ms=100.0, latency_baseline_ms=100.0,
                               window_error_rate=0.0, output_tps=100.0)}
    totals, _ = _profile("seed-001").score(context(stats, engines), backends("a", "b"))
    assert totals["a"] == pytest.approx(0.3 * 0.75 + 0.25 * 0.5 + 0.2 * 0.9 + 0.15 * 0.5 + 0.1)
    assert totals["b"] == pytest.approx(0.3 * 0.25 + 0.25 + 0.2 + 0.15 + 0.1)


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]),
                       st.tuples(st.integers(0, 50), st.none() | st.integers(0, 500))))
def test_scores_bounded_and_order_is_a_permutation(raw):
    stats = {k: BackendStats(k, in_flight=n) for k, (n, _) in raw.items()}
    engines = {k: signals(waiting=w) for k, (_, w) in raw.items() if w is not None}
    ranked = PROFILE.rank(context(stats, engines), BACKENDS)
    assert sorted(ids(ranked)) == ["a", "b", "c"]
    assert all(0.0 <= s <= 1.0 for c in ranked for s in c.scores.values())
    assert all(0.0 <= c.score <= 1.0 + 1e-9 for c in ranked)
    assert [c.score for c in ranked] == sorted((c.score for c in ranked), reverse=True)


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]),
                       st.tuples(st.none() | st.floats(0, 1), st.none() | st.integers(0, 99),
                                 st.none() | st.floats(1, 1e4))))
def test_seed_000_totals_stay_within_the_signed_weight_range(raw):
    gib = 2 ** 30
    engines = {k: signals(gpu_util=u, waiting=w, gpu_mem_free_bytes=gib, gpu_mem_used_bytes=gib)
               for k, (u, w, _) in raw.items()}
    stats = {k: BackendStats(k, ttft_p95_ms=p, ttft_baseline_ms=100.0)
             for k, (_, _, p) in raw.items()}
    totals, _ = _profile("seed-000").score(context(stats, engines), BACKENDS)
    assert all(-0.1 - 1e-9 <= t <= 0.9 + 1e-9 for t in totals.values()), totals
