"""The contract every registered plugin keeps (DESIGN.md §4), checked for all of them:

- Scorer: returns ``{backend_id: score}`` over a subset of the candidates, every score a
  finite number in [0, 1], whatever signals are present, stale or absent (breakers open,
  half-open or held included); its ``column`` holds the same values in the candidates'
  order, NaN where the map has none, and stays in [0, 1] when it says it is ``bounded``.
- Picker: returns every key exactly once (non-empty when the input is).
- Filter: returns a subset of the candidates in their given order.
- Source (parser): any text gives an ``EngineSignals`` whose ``missing`` names exactly the
  expected signals that are None; nothing raises. Every metrics format of the engine-kind
  table has a source.
"""

from __future__ import annotations

import math

import pytest
from fakes.anchor_ctx import context, request
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.anchor.registry import Shared, register_builtins
from llmroute.anchor.sources.dcgm import parse_dcgm
from llmroute.anchor.sources.http import FORMATS, source_for
from llmroute.anchor.sources.llamacpp import parse_llamacpp_metrics, parse_llamacpp_slots
from llmroute.anchor.sources.ollama import parse_ollama_ps
from llmroute.anchor.sources.sglang import parse_sglang_metrics
from llmroute.anchor.sources.signals import SIGNALS
from llmroute.anchor.sources.vllm import parse_vllm_metrics
from llmroute.backends.engines import ENGINES
from llmroute.types import (
    Backend,
    BackendStats,
    BreakerView,
    EngineSignals,
    Intent,
    QualityState,
    QualityView,
)

REG = register_builtins()
IDS = ["a", "b", "c", "d"]
CANDS = [Backend(i, "p" if i < "c" else "q", e, f"http://{i}", "m", 2048)
         for i, e in zip(IDS, ["vllm", "llamacpp", "ollama", "openai"])]

maybe_frac = st.none() | st.floats(0, 1)
maybe_count = st.none() | st.integers(0, 10_000)
engine_signals = st.builds(
    EngineSignals, taken_at=st.floats(0, 100), source=st.just("t"), running=maybe_count,
    waiting=maybe_count, kv_cache_usage=maybe_frac, idle_slots=maybe_count,
    total_slots=maybe_count, gpu_mem_used_bytes=maybe_count, gpu_mem_free_bytes=maybe_count,
    gpu_util=maybe_frac, gpu_temp_c=st.none() | st.floats(0, 130),
    gpu_mem_bw_util=maybe_frac, net_rtt_ms=st.none() | st.floats(0, 1e4),
    net_bytes_per_s=st.none() | st.floats(0, 1e10))
maybe_ms = st.none() | st.floats(0, 1e6)
backend_stats = st.builds(
    BackendStats, backend_id=st.just("x"), in_flight=st.integers(0, 1000),
    ttft_p95_ms=maybe_ms, ttft_baseline_ms=maybe_ms, latency_p95_ms=maybe_ms,
    latency_baseline_ms=maybe_ms, window_error_rate=maybe_frac,
    output_tps=st.none() | st.floats(0, 1e5))
breaker_views = st.builds(BreakerView, opened_at=st.none() | st.floats(0, 100),
                          cooldown_s=st.floats(0.1, 60), held_until=st.floats(-1, 100),
                          probe_free=st.booleans())
quality_views = st.builds(QualityView, state=st.sampled_from(list(QualityState)),
                          share=st.floats(0, 1), since=st.floats(0, 100))
snapshots = st.tuples(st.dictionaries(st.sampled_from(IDS), backend_stats),
                      st.dictionaries(st.sampled_from(IDS), engine_signals),
                      st.dictionaries(st.sampled_from(IDS), breaker_views),
                      st.frozensets(st.sampled_from(IDS)),
                      st.dictionaries(st.sampled_from(IDS), quality_views))
intents = st.builds(Intent, label=st.sampled_from(["code", "chat", "math"]),
                    confidence=st.floats(0, 1), complexity=st.floats(0.1, 5.0))


@pytest.mark.parametrize("name", sorted(REG.scorers))
@settings(max_examples=40, deadline=None)
@given(snap=snapshots, intent=intents, text=st.text(max_size=600))
def test_scorer_contract(name, snap, intent, text):
    scorer = REG.scorer(name, Shared())
    ctx = context(snap[0], snap[1], req=request(text), intent=intent, now=50.0,
                  breakers=snap[2])
    scored = scorer.score(ctx, CANDS)
    assert set(scored) <= set(IDS)
    assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in scored.values()), scored
    column = scorer.column(ctx, CANDS)
    assert len(column) == len(CANDS)
    assert {b.id: x for b, x in zip(CANDS, column) if x == x} == scored
    if scorer.bounded:
        assert all(0.0 <= x <= 1.0 for x in column if x == x), column


@pytest.mark.parametrize("name", sorted(REG.pickers))
@given(st.dictionaries(st.sampled_from(IDS), st.floats(-2, 2), min_size=1))
def test_picker_contract(name, scored):
    order = REG.picker(name, Shared()).pick(scored)
    assert sorted(order) == sorted(scored) and len(order) == len(scored)


@pytest.mark.parametrize("name", sorted(REG.filters))
@settings(max_examples=40, deadline=None)
@given(snap=snapshots, prompt=st.integers(0, 3000), tools=st.booleans(),
       logprobs=st.booleans())
def test_filter_contract(name, snap, prompt, tools, logprobs):
    req = request(prompt_tokens=prompt, body={"logprobs": logprobs}, has_tools=tools)
    ctx = context(snap[0], snap[1], req=req, now=50.0, breakers=snap[2], hot=snap[3],
                  quality=snap[4])
    kept = REG.filter(name, Shared()).filter(ctx, CANDS)
    positions = [CANDS.index(b) for b in kept]
    assert positions == sorted(positions)
    if name in ("health", "thermal", "quality"):  # they never empty a candidate list
        assert kept


PARSERS = {"vllm": parse_vllm_metrics, "sglang": parse_sglang_metrics,
           "llamacpp-metrics": parse_llamacpp_metrics, "llamacpp-slots": parse_llamacpp_slots,
           "ollama": parse_ollama_ps, "dcgm": parse_dcgm}
PROM_LIKE = st.lists(st.sampled_from([
    "vllm:num_requests_waiting 3\n", "sglang:num_queue_reqs{tp_rank=\"0\"} NaN\n",
    "llamacpp:requests_processing -1\n", "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 140\n",
    "# TYPE x histogram\n", "x_bucket{le=\"0.1\"} 5\n", "x_bucket{le=\"+Inf\"} 2\n",
    "{\"models\": [{\"name\": 1}]}", "[{\"is_processing\": true}]", "garbage {{\n"]),
    max_size=6).map("".join)


@pytest.mark.parametrize("name", sorted(PARSERS))
@given(text=st.text(max_size=300) | PROM_LIKE)
def test_source_contract(name, text):
    got = PARSERS[name](text, 1.0)
    assert isinstance(got, EngineSignals) and got.taken_at == 1.0
    for n in got.missing:
        assert getattr(got, n) is None
    assert set(got.missing) <= set(SIGNALS)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_kind_with_metrics_has_a_source(engine):
    endpoint = ENGINES[engine].metrics
    assert (source_for(engine, None, 1.0) is None) == (endpoint is None)  # type: ignore[arg-type]
    assert endpoint is None or endpoint.format in FORMATS
