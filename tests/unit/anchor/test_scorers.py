"""Each scorer: its formula on known signals, and absence when the signal is missing."""

from __future__ import annotations

import pytest
from fakes.anchor_ctx import backends, context, request, signals

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.prefix import Affinity
from llmroute.anchor.scorers.error_rate import ErrorRateScorer
from llmroute.anchor.scorers.free_vram import FreeVramScorer
from llmroute.anchor.scorers.gpu_util import GpuUtilScorer
from llmroute.anchor.scorers.health import HealthScorer
from llmroute.anchor.scorers.inflight import InFlightScorer
from llmroute.anchor.scorers.intent_fit import IntentFitScorer, PoolFit, fit
from llmroute.anchor.scorers.kv_balance import KvBalanceScorer
from llmroute.anchor.scorers.kv_cache import KvCacheScorer
from llmroute.anchor.scorers.latency import LatencyScorer
from llmroute.anchor.scorers.prefix_affinity import PrefixAffinityScorer
from llmroute.anchor.scorers.queue_depth import QueueDepthScorer
from llmroute.anchor.scorers.throughput import ThroughputScorer
from llmroute.config import BreakerConfig
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.types import BackendStats, Intent, Outcome

GIB = 2 ** 30
AB = backends("a", "b")

ENGINE_CASES = [
    (QueueDepthScorer(), {"a": signals(waiting=0), "b": signals(waiting=3)}, {"a": 1.0, "b": 0.25}),
    (QueueDepthScorer(), {"a": signals(running=2)}, {}),
    (KvCacheScorer(), {"a": signals(kv_cache_usage=0.2), "b": signals(kv_cache_usage=1.0)},
     {"a": 0.8, "b": 0.0}),
    (KvCacheScorer(), {"a": signals(idle_slots=1, total_slots=4)}, {"a": 0.25}),
    (KvCacheScorer(), {"a": signals(idle_slots=1, total_slots=0)}, {}),
    (FreeVramScorer(), {"a": signals(gpu_mem_free_bytes=3 * GIB, gpu_mem_used_bytes=GIB)},
     {"a": 0.75}),
    (FreeVramScorer(), {"a": signals(gpu_mem_free_bytes=3 * GIB)}, {}),
    (GpuUtilScorer(), {"a": signals(gpu_util=0.9), "b": signals(gpu_util=0.0)},
     {"a": pytest.approx(0.1), "b": 1.0}),
    (GpuUtilScorer(), {}, {}),
    (KvBalanceScorer(), {"a": signals(kv_cache_usage=0.2), "b": signals(kv_cache_usage=0.3)},
     {"a": pytest.approx(0.75), "b": pytest.approx(0.25)}),
    (KvBalanceScorer(), {"a": signals(kv_cache_usage=0.1), "b": signals(kv_cache_usage=0.9)},
     {"a": 1.0, "b": 0.0}),
    (KvBalanceScorer(), {"a": signals(kv_cache_usage=0.7)}, {"a": 0.5}),
    (KvBalanceScorer(), {}, {}),
]


@pytest.mark.parametrize("scorer,engines,expected", ENGINE_CASES, ids=[
    "queue", "queue-missing", "kv", "kv-llamacpp-slots", "kv-no-slots", "vram",
    "vram-half-missing", "gpu-util", "gpu-absent", "kv-balance", "kv-balance-clamped",
    "kv-balance-alone", "kv-balance-absent"])
def test_engine_signal_scorers(scorer, engines, expected):
    assert scorer.score(context(engines=engines), AB) == expected


def test_kv_balance_weighs_the_request_against_each_cache_size():
    # both at 30 %; a 3000-token prompt + 2000 max_tokens has a footprint of 4000 tokens:
    # 40 points of a's 10k cache, 1 point of b's 400k one. Mean usage 0.3.
    engines = {"a": signals(kv_cache_usage=0.3, kv_capacity_tokens=10_000),
               "b": signals(kv_cache_usage=0.3, kv_capacity_tokens=400_000)}
    ctx = context(engines=engines, req=request(prompt_tokens=3000, max_tokens=2000))
    assert KvBalanceScorer().score(ctx, AB) == {"a": 0.0, "b": pytest.approx(0.45)}
    # a small request barely moves either; without a known size nothing is added
    small = context(engines=engines, req=request(prompt_tokens=10))
    assert KvBalanceScorer().score(small, AB) == {"a": pytest.approx(0.4950),
                                                  "b": pytest.approx(0.4999, abs=1e-4)}
    unsized = {"a": signals(kv_cache_usage=0.3), "b": signals(kv_cache_usage=0.3)}
    assert KvBalanceScorer().score(context(engines=unsized, req=request(prompt_tokens=3000)),
                                   AB) == {"a": 0.5, "b": 0.5}


def test_kv_balance_counts_a_request_longer_on_an_engine_that_decodes_slower():
    # same 100k caches at 30 %; b decodes 3x slower (TPOT 60 vs 20 ms; mean 40): the
    # 4000-token footprint is 4 points x 20/40 on a and 4 points x 60/40 on b
    engines = {"a": signals(kv_cache_usage=0.3, kv_capacity_tokens=100_000, tpot_p50_ms=20.0),
               "b": signals(kv_cache_usage=0.3, kv_capacity_tokens=100_000, tpot_p50_ms=60.0)}
    ctx = context(engines=engines, req=request(prompt_tokens=3000, max_tokens=2000))
    assert KvBalanceScorer().score(ctx, AB) == {"a": pytest.approx(0.5 - 0.02 * 5),
                                                "b": pytest.approx(0.5 - 0.06 * 5)}
    # an engine without a TPOT counts the plain share (weight 1); a new decision, a new
    # context (a context memoises each candidate's signals)
    engines["b"] = signals(kv_cache_usage=0.3, kv_capacity_tokens=100_000)
    ctx = context(engines=engines, req=request(prompt_tokens=3000, max_tokens=2000))
    assert KvBalanceScorer().score(ctx, AB) == {"a": pytest.approx(0.5 - 0.04 * 5),
                                                "b": pytest.approx(0.5 - 0.04 * 5)}


STATS_CASES = [
    (InFlightScorer(), {"a": BackendStats("a", in_flight=1)}, {"a": 0.5, "b": 1.0}),
    (LatencyScorer(), {"a": BackendStats("a", ttft_p95_ms=300.0, ttft_baseline_ms=100.0),
                       "b": BackendStats("b", ttft_p95_ms=80.0, ttft_baseline_ms=100.0)},
     {"a": pytest.approx(1 / 3), "b": 1.0}),
    (LatencyScorer(), {"a": BackendStats("a", latency_p95_ms=400.0, latency_baseline_ms=200.0)},
     {"a": 0.5}),
    (LatencyScorer(), {"a": BackendStats("a", latency_ms=100.0)}, {}),
    (ErrorRateScorer(), {"a": BackendStats("a", window_error_rate=0.25)}, {"a": 0.75}),
    (ThroughputScorer(), {"a": BackendStats("a", output_tps=30.0),
                          "b": BackendStats("b", output_tps=60.0)}, {"a": 0.5, "b": 1.0}),
    (ThroughputScorer(), {"a": BackendStats("a", output_tps=0.0)}, {}),
]


@pytest.mark.parametrize("scorer,stats,expected", STATS_CASES, ids=[
    "in-flight", "latency-ttft", "latency-e2e", "latency-no-baseline", "error-rate",
    "throughput", "throughput-zero"])
def test_router_side_scorers(scorer, stats, expected):
    assert scorer.score(context(stats), AB) == expected


def test_health_scorer_follows_the_breaker():
    breaker = CircuitBreaker(BreakerConfig(min_requests=1, failure_rate=0.5, cooldown_s=5))
    breaker.record("a", Outcome.FAILURE, 0.0)
    scorer = HealthScorer()
    views = breaker.views()
    assert scorer.score(context(now=1.0, breakers=views), AB) == {"a": 0.0, "b": 1.0}
    assert scorer.score(context(now=10.0, breakers=views), AB) == {"a": 0.5, "b": 1.0}


def test_prefix_affinity_prefers_the_backend_that_served_the_prefix():
    affinity = Affinity(PrefixIndex(block_tokens=2, max_blocks=4))  # keys of 6 characters
    affinity.dispatched(request("abcdefghijklXX", prompt_tokens=5), "b", 5)
    affinity.dispatched(request("abcdefYYYYYY", prompt_tokens=4), "a", 4)
    scorer = PrefixAffinityScorer(affinity, priced=False)
    asked = request("abcdefghijklZZZZZZ", prompt_tokens=6)
    assert scorer.score(context(req=asked), AB) == {"a": pytest.approx(2 / 6),
                                                    "b": pytest.approx(4 / 6)}
    # priced, before any TTFT model: a has 4 tokens to prefill against b's 2, no credit
    assert PrefixAffinityScorer(affinity).score(context(req=asked), AB) == {
        "a": 0.0, "b": pytest.approx(4 / 6)}
    assert scorer.score(context(req=request("abc", prompt_tokens=1)), AB) == {}
    affinity.forget("b")
    assert scorer.score(context(req=asked), AB) == {"a": pytest.approx(2 / 6), "b": 0.0}


@pytest.mark.parametrize("pool,intent,expected", [
    (PoolFit(("code",)), Intent("code", 1.0), 1.0),
    (PoolFit(("code",)), Intent("chat", 1.0), 0.0),
    (PoolFit(("code",)), Intent("code", 0.0), 0.5),
    (PoolFit(("code",)), Intent("chat", 0.5), 0.25),
    (PoolFit((), 2.0), Intent("chat", 1.0, complexity=4.0), 0.5),
    (PoolFit(("math",), 5.0), Intent("math", 1.0, complexity=1.0), 1.0),
    (PoolFit(), Intent("chat", 1.0), None),
], ids=["match", "mismatch", "unsure", "half-sure-mismatch", "too-hard", "fits", "undeclared"])
def test_intent_fit(pool, intent, expected):
    assert fit(pool, intent) == (pytest.approx(expected) if expected is not None else None)


def test_intent_fit_scores_by_pool():
    scorer = IntentFitScorer({"code": PoolFit(("code",)), "chat": PoolFit(("chat",))})
    cands = backends("a", pool="code") + backends("b", pool="chat") + backends("c", pool="x")
    assert scorer.score(context(intent=Intent("code", 1.0)), cands) == {"a": 1.0, "b": 0.0}


@pytest.mark.parametrize("pending_a,credited", [(0, True), (100, True), (2_000, False)],
                         ids=["idle-holder", "short-queue", "queue-costs-more-than-the-hit"])
def test_prefix_affinity_never_credits_a_hit_its_queue_outweighs(pending_a, credited):
    affinity = Affinity(PrefixIndex(block_tokens=100, max_blocks=16))
    affinity.pricing = True
    text = "q" * 3000  # 1000 tokens, ten keys of 100
    affinity.dispatched(request(text, prompt_tokens=1000), "a", 1000)
    stats = {b: BackendStats(b, prefill_tokens=p, prefill_ms_per_token=1.0,
                             prefill_overhead_ms=0.0)
             for b, p in (("a", pending_a), ("b", 0))}
    # a holds 999 of 1000 tokens: predicted 1 + pending ms; b predicted 1000 ms
    scored = PrefixAffinityScorer(affinity).score(
        context(stats, req=request(text, prompt_tokens=1000)), AB)
    assert scored == {"a": pytest.approx(0.999) if credited else 0.0, "b": 0.0}
    unpriced = PrefixAffinityScorer(affinity, priced=False).score(
        context(stats, req=request(text, prompt_tokens=1000)), AB)
    assert unpriced["a"] == pytest.approx(0.999)
