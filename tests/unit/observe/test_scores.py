"""The anchor's scores on ``/metrics``: one gauge per backend and scorer (0-1), the weighted
total per backend and the scorer weights, computed at scrape time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from fakes.router import make_config, open_router
from llmroute.observe.scores import ScoreCollector
from llmroute.types import EngineSignals


async def test_scores_follow_the_signals_at_scrape_time():
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"},
                       {"id": "b", "pool": "general", "base_url": "http://127.0.0.1:9"}],
                      anchor={"stale_after_s": 3600})
    async with open_router(cfg) as (rt, client):
        for bid, kv in (("a", 0.1), ("b", 0.9)):
            rt.signals.record_ok(bid, EngineSignals(rt.clock(), "vllm", running=1, waiting=0,
                                                    kv_cache_usage=kv), rt.clock())
        text = (await client.get("/metrics")).text
        report = (await client.get("/debug/backends")).json()
    rows = {r["id"]: r for r in report["backends"]}
    for bid in ("a", "b"):
        for scorer, value in rows[bid]["scores"].items():
            if value is not None:
                assert f'llmroute_backend_score{{backend="{bid}",scorer="{scorer}"}} ' \
                    f'{float(value)!r}' in text
        assert f'llmroute_backend_weighted_score{{backend="{bid}"}}' in text
    assert rows["a"]["scores"]["kv-cache"] > rows["b"]["scores"]["kv-cache"]
    for scorer, weight in report["weights"].items():
        assert f'llmroute_scorer_weight{{scorer="{scorer}"}} {float(weight)!r}' in text


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.tuples(
    st.dictionaries(st.sampled_from(["x", "y"]), st.none() | st.floats(0, 1)),
    st.none() | st.floats(0, 3))))
def test_a_missing_score_has_no_sample(scores):
    registry = CollectorRegistry()
    registry.register(ScoreCollector(lambda: scores, {"x": 0.5}))
    text = generate_latest(registry).decode()
    samples = [line for line in text.splitlines() if line.startswith("llmroute_backend_score{")]
    assert len(samples) == sum(v is not None for parts, _ in scores.values()
                               for v in parts.values())
    totals = [line for line in text.splitlines() if line.startswith("llmroute_backend_weighted")]
    assert len(totals) == sum(t is not None for _, t in scores.values())
