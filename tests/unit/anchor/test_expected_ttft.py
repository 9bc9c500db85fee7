"""The TTFT model (weighted least squares over first tokens), the router's prefill tickets
and the expected-ttft scorer and ttft-headroom filter built on them."""

from __future__ import annotations

import pytest
from fakes.anchor_ctx import backends, context, request
from hypothesis import given
from hypothesis import strategies as st

from llmroute.anchor.filters.ttft_headroom import TtftHeadroomFilter
from llmroute.anchor.scorers.expected_ttft import (
    ExpectedTtftScorer,
    expected_ttft_ms,
    predicted_ttfts,
)
from llmroute.anchor.stats.prefill import MIN_SAMPLES, PrefillFit
from llmroute.anchor.stats.router import RouterStats
from llmroute.types import BackendStats


def test_fit_recovers_overhead_and_slope_of_a_line():
    fit = PrefillFit()
    for tokens in (100, 900, 2000, 4000, 300, 6000):
        fit.add(tokens, 40.0 + 0.25 * tokens)
    overhead, per_token = fit.model()
    assert overhead == pytest.approx(40.0)
    assert per_token == pytest.approx(0.25)


@pytest.mark.parametrize("samples", [
    [(1000, 500.0)],
    [(1000, 500.0)] * MIN_SAMPLES,
    [(1000, 900.0), (2000, 100.0), (3000, 50.0), (4000, 40.0)],
    [(1000, 10.0), (1100, 500.0), (1200, 600.0), (1300, 700.0)],
], ids=["one-sample", "all-same-size", "falling-slope", "negative-intercept"])
def test_fit_falls_back_to_the_line_through_the_origin(samples):
    fit = PrefillFit()
    for tokens, ms in samples:
        fit.add(tokens, ms)
    weights = [fit.decay ** (len(samples) - 1 - i) for i in range(len(samples))]
    ratio = sum(w * ms for w, (_, ms) in zip(weights, samples)) / \
        sum(w * t for w, (t, _) in zip(weights, samples))
    assert fit.model() == (0.0, pytest.approx(ratio))


def test_fit_ignores_unusable_samples_and_forgets_old_ones():
    fit = PrefillFit(decay=0.5)
    fit.add(0, 100.0)
    fit.add(100, -1.0)
    fit.add(100, float("nan"))
    assert fit.model() is None
    fit.add(1000, 1000.0)  # 1 ms/token, then the engine gets ten times faster
    for _ in range(20):
        fit.add(1000, 100.0)
    assert fit.model()[1] == pytest.approx(0.1, rel=1e-4)


def test_tickets_count_pending_prompt_tokens_and_teach_the_model():
    s = RouterStats.for_backends(["a", "b"])
    first = s.sent("a", 1000, now=0.0)
    second = s.sent("a", 3000, now=0.0)
    assert s.snapshot(0.0).stats["a"].prefill_tokens == 4000
    assert second.ahead == 4000
    s.prefill_ended(first, 0.5, first_token=True)   # 1000 tokens ahead in 500 ms
    s.prefill_ended(second, 2.0, first_token=False)  # failed over: nothing learnt
    a = s.snapshot(2.0).stats["a"]
    assert a.prefill_tokens == 0
    assert (a.prefill_overhead_ms, a.prefill_ms_per_token) == (0.0, pytest.approx(0.5))
    assert s.snapshot(2.0).stats["b"].prefill_ms_per_token is None


def test_tickets_for_unknown_backends_are_ignored():
    s = RouterStats.for_backends(["a"])
    ticket = s.sent("canned", 10, 0.0)
    assert ticket is None
    s.prefill_ended(ticket, 1.0, first_token=True)
    assert s.snapshot(1.0).stats["a"].prefill_tokens == 0


def _stats(bid: str, pending: int, per_token: float | None, overhead: float = 0.0):
    return BackendStats(bid, prefill_tokens=pending, prefill_ms_per_token=per_token,
                        prefill_overhead_ms=overhead)


def test_expected_ttft_formula():
    assert expected_ttft_ms(_stats("a", 3000, 0.1, 20.0), 1000) == pytest.approx(420.0)
    assert expected_ttft_ms(_stats("a", 0, None), 1000) is None
    assert expected_ttft_ms(None, 1000) is None


def test_long_prompt_goes_to_the_fast_engine_despite_its_queue():
    # a: fast (0.05 ms/token) with 4000 tokens queued; b: idle but 0.5 ms/token.
    stats = {"a": _stats("a", 4000, 0.05, 30.0), "b": _stats("b", 0, 0.5, 30.0)}
    scored = ExpectedTtftScorer().score(context(stats, req=request(prompt_tokens=4000)),
                                        backends("a", "b"))
    # a: 30 + 8000·0.05 = 430 ms; b: 30 + 4000·0.5 = 2030 ms
    assert scored == {"a": 1.0, "b": pytest.approx(430 / 2030)}


def test_unknown_backends_are_tried_optimistically_and_nothing_known_is_missing():
    scorer = ExpectedTtftScorer()
    stats = {"a": _stats("a", 0, 0.2, 50.0)}
    scored = scorer.score(context(stats, req=request(prompt_tokens=500)), backends("a", "b"))
    assert scored == {"a": pytest.approx(100 / 150), "b": 1.0}  # a: 50 + 100 ms, b: 100 ms
    assert scorer.score(context(req=request(prompt_tokens=500)), backends("a", "b")) == {}


@given(st.lists(st.tuples(st.integers(0, 10**5), st.none() | st.floats(1e-4, 10.0),
                          st.floats(0.0, 1e4)), min_size=1, max_size=8),
       st.integers(1, 10**5))
def test_expected_ttft_scores_are_fractions_and_the_soonest_scores_one(rows, prompt):
    ids = [f"b{i}" for i in range(len(rows))]
    stats = {bid: _stats(bid, q, r, o) for bid, (q, r, o) in zip(ids, rows)}
    scored = ExpectedTtftScorer().score(context(stats, req=request(prompt_tokens=prompt)),
                                        backends(*ids))
    if all(r is None for _, r, _ in rows):
        assert scored == {}
        return
    assert set(scored) == set(ids)
    assert all(0.0 < v <= 1.0 for v in scored.values())
    assert max(scored.values()) == 1.0


def test_finishing_with_a_pending_ticket_ends_its_prefill_in_the_same_update():
    s = RouterStats.for_backends(["a"])
    ticket = s.sent("a", 700, 0.0)
    assert s.snapshot(0.0).stats["a"].in_flight == 1
    s.finished("a", 1.0, ok=True, latency_ms=1000.0, ticket=ticket)
    a = s.snapshot(1.0).stats["a"]
    assert (a.in_flight, a.prefill_tokens, a.prefill_ms_per_token) == (0, 0, None)


def test_a_ticket_of_another_backend_still_ends_when_passed_to_finished():
    s = RouterStats.for_backends(["a", "b"])
    ticket = s.sent("b", 300, 0.0)
    s.sent("a", 1, 0.0)
    s.finished("a", 1.0, ok=True, ticket=ticket)
    assert s.snapshot(1.0).stats["b"].prefill_tokens == 0


def _headroom(stats: dict[str, BackendStats], prompt: int, ids: list[str],
              **kw: float | int) -> list[str]:
    ctx = context(stats, req=request(prompt_tokens=prompt))
    return [b.id for b in TtftHeadroomFilter(**kw).filter(ctx, backends(*ids))]


def test_headroom_drops_backends_predicted_far_behind_the_soonest():
    # fast: 100 + 1000·0.1 = 200 ms; mid: 0 + 1000·0.6 = 600 ms; slow: 100 + 60000·0.1 = 6100 ms
    stats = {"fast": _stats("fast", 0, 0.1, 100.0), "mid": _stats("mid", 0, 0.6),
             "slow": _stats("slow", 59000, 0.1, 100.0)}
    ids = ["slow", "mid", "fast"]
    # limit = max(3 × 200, 200 + 1000) = 1200 ms: mid stays, slow goes (order kept)
    assert _headroom(stats, 1000, ids, keep=1) == ["mid", "fast"]
    # limit = max(2 × 200, 200 + 0) = 400 ms: only the soonest
    assert _headroom(stats, 1000, ids, factor=2.0, slack_ms=0.0, keep=1) == ["fast"]
    # limit = max(40 × 200, 200) = 8000 ms: everyone
    assert _headroom(stats, 1000, ids, factor=40.0, slack_ms=0.0, keep=1) == ids


def test_headroom_keeps_the_soonest_few_when_fewer_pass():
    # predicted 200, 600, 6100 and 900 ms; limit 400 ms passes only "fast"
    stats = {"fast": _stats("fast", 0, 0.1, 100.0), "mid": _stats("mid", 0, 0.6),
             "slow": _stats("slow", 59000, 0.1, 100.0), "late": _stats("late", 0, 0.9)}
    ids = ["slow", "late", "mid", "fast"]
    narrow = {"factor": 2.0, "slack_ms": 0.0}
    assert _headroom(stats, 1000, ids, **narrow, keep=2) == ["mid", "fast"]  # order kept
    assert _headroom(stats, 1000, ids, **narrow, keep=3) == ["late", "mid", "fast"]
    assert _headroom(stats, 1000, ids, **narrow, keep=9) == ids
    # enough pass the default limit (1200 ms: fast, mid, late): keep changes nothing
    assert _headroom(stats, 1000, ids, keep=2) == ["late", "mid", "fast"]


def test_headroom_keeps_everything_without_models_and_keeps_unlearnt_backends():
    ids = ["a", "b", "c"]
    assert _headroom({}, 1000, ids, slack_ms=0.0) == ids  # nobody has a model yet
    # c has no model: predicted optimistically at a's rate (1000 · 0.1 = 100 ms) so it
    # stays and gets learnt; b (10000 ms) goes
    stats = {"a": _stats("a", 0, 0.1), "b": _stats("b", 0, 10.0)}
    assert _headroom(stats, 1000, ids, factor=2.0, slack_ms=0.0, keep=1) == ["a", "c"]


def test_headroom_hands_the_same_list_and_predictions_to_the_scorer_when_all_pass():
    stats = {"a": _stats("a", 0, 0.1), "b": _stats("b", 0, 0.15)}
    ctx = context(stats, req=request(prompt_tokens=1000))
    candidates = backends("a", "b")
    kept = TtftHeadroomFilter().filter(ctx, candidates)
    assert kept is candidates
    assert predicted_ttfts(ctx, kept) is predicted_ttfts(ctx, candidates)  # memoised
    assert predicted_ttfts(ctx, kept) == [pytest.approx(100.0), pytest.approx(150.0)]


@given(st.lists(st.tuples(st.integers(0, 10**5), st.none() | st.floats(1e-4, 10.0),
                          st.floats(0.0, 1e4)), min_size=1, max_size=8),
       st.integers(1, 10**5), st.floats(1.0, 10.0), st.floats(0.0, 5000.0),
       st.integers(1, 4))
def test_headroom_never_drops_the_soonest_nor_keeps_one_past_the_limit(rows, prompt, factor,
                                                                      slack, keep):
    ids = [f"b{i}" for i in range(len(rows))]
    stats = {bid: _stats(bid, q, r, o) for bid, (q, r, o) in zip(ids, rows)}
    ctx = context(stats, req=request(prompt_tokens=prompt))
    candidates = backends(*ids)
    kept = [b.id for b in TtftHeadroomFilter(factor, slack, keep).filter(ctx, candidates)]
    times = dict(zip(ids, predicted_ttfts(ctx, candidates)))
    if all(r is None for _, r, _ in rows):
        assert kept == ids
        return
    best = min(times.values())
    assert kept and [i for i in ids if i in kept] == kept
    assert min(times, key=times.get) in kept
    limit = max(factor * best, best + slack)
    passing = [i for i in ids if times[i] <= limit]
    if len(passing) >= keep:
        assert kept == passing
    else:  # the `keep` soonest (or all): nothing dropped is sooner than anything kept
        assert len(kept) == min(keep, len(ids))
        assert all(times[d] >= max(times[k] for k in kept) for d in ids if d not in kept)
