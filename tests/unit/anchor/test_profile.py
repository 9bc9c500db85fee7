"""Anchor profile: filters, weighted scorers in [0, 1], argmax with deterministic ties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmroute.anchor.filters.context_fit import ContextFitFilter
from llmroute.anchor.pickers.argmax import ArgmaxPicker
from llmroute.anchor.profile import Profile
from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.inflight import InFlightScorer
from llmroute.anchor.scorers.latency import LatencyScorer
from llmroute.types import Backend, BackendStats, ChatRequest, Intent, MetricsSnapshot

BACKENDS = [Backend(i, "p", "vllm", "http://x", "m", ctx)
            for i, ctx in [("a", 2048), ("b", 2048), ("c", 8192)]]


def ctx(stats: dict[str, BackendStats], prompt_tokens: int = 10, max_tokens: int | None = None):
    request = ChatRequest("chat", {}, "auto", False, "x", prompt_tokens, max_tokens, "r")
    return AnchorContext(request, Intent("chat", 1.0), MetricsSnapshot(stats), 0.0)


PROFILE = Profile((ContextFitFilter(),), ((InFlightScorer(), 0.6), (LatencyScorer(), 0.4)),
                  ArgmaxPicker())


def test_idle_and_unmeasured_ties_keep_config_order():
    assert [c.backend.id for c in PROFILE.rank(ctx({}), BACKENDS)] == ["a", "b", "c"]


def test_busier_backend_goes_last():
    stats = {"a": BackendStats("a", in_flight=3), "b": BackendStats("b", in_flight=1)}
    assert [c.backend.id for c in PROFILE.rank(ctx(stats), BACKENDS)] == ["c", "b", "a"]


def test_slower_backend_loses_on_latency():
    stats = {"a": BackendStats("a", latency_ms=900), "b": BackendStats("b", latency_ms=300),
             "c": BackendStats("c", latency_ms=600)}
    ranked = PROFILE.rank(ctx(stats), BACKENDS)
    assert [c.backend.id for c in ranked] == ["b", "c", "a"]
    assert ranked[0].scores == {"in-flight": 1.0, "latency": 1.0}


def test_context_fit_drops_small_backends():
    ranked = PROFILE.rank(ctx({}, prompt_tokens=1900, max_tokens=400), BACKENDS)
    assert [c.backend.id for c in ranked] == ["c"]


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]),
                       st.tuples(st.integers(0, 50), st.none() | st.floats(0.001, 1e6))))
def test_scores_bounded_and_order_is_a_permutation(raw):
    stats = {k: BackendStats(k, in_flight=n, latency_ms=lat) for k, (n, lat) in raw.items()}
    ranked = PROFILE.rank(ctx(stats), BACKENDS)
    assert sorted(c.backend.id for c in ranked) == ["a", "b", "c"]
    assert all(0.0 <= s <= 1.0 for c in ranked for s in c.scores.values())
    assert [c.score for c in ranked] == sorted((c.score for c in ranked), reverse=True)
