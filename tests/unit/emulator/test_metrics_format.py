"""The emulator's ``/metrics`` against a real vLLM V1 scrape: same names, types, labels and
histogram buckets (skipped when the shared captures are absent); the emulator's own GPU-busy
counter beside them."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmroute.emulator.metrics import EngineMetrics
from llmroute.emulator.scheduler import Sequence
from llmroute.emulator.spec import EngineSpec

CAPTURE = Path("/work/shared/data/engine-metrics/vllm-v1-0.20.2rc1-metrics-scrape3.txt")


def families(text: str) -> dict[str, tuple[str, set[str], list[str]]]:
    """name → (type, label names, sorted ``le`` bounds of its buckets)."""
    out = {}
    for f in text_string_to_metric_families(text):
        labels = {k for s in f.samples for k in s.labels if k != "le"}
        les = sorted({s.labels["le"] for s in f.samples if "le" in s.labels})
        out[f.name] = (f.type, labels, les)
    return out


@pytest.fixture
def pair() -> tuple[dict, dict]:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE} not present")
    sched = EngineSpec(time_scale=0.01).scheduler()
    metrics = EngineMetrics(sched, "emulated-7b")
    sched.add(Sequence("a", 100, 2, 0.0))
    while (batch := sched.schedule(0.0)) is not None:
        metrics.record(sched.complete(batch), batch.duration)
    return families(metrics.render().decode()), families(CAPTURE.read_text())


OWN = "llmroute_emulator_"
"""The prefix of the emulator's own families (not vLLM's, so absent from a real scrape)."""


def test_every_emulated_family_matches_the_real_one(pair: tuple[dict, dict]) -> None:
    ours, real = pair
    assert ours, "no metrics rendered"
    assert {name for name in ours if name.startswith(OWN)} == {
        f"{OWN}gpu_busy_seconds", f"{OWN}gpu_busy_seconds_created"}
    for name, (kind, labels, les) in ours.items():
        if name.startswith(OWN):
            continue
        assert name in real, name
        real_kind, real_labels, real_les = real[name]
        assert kind == real_kind, name
        assert labels <= real_labels, name
        assert les == real_les, name


def test_the_signals_the_anchor_reads_are_all_there(pair: tuple[dict, dict]) -> None:
    ours, _ = pair
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds",
                 "vllm:inter_token_latency_seconds", "vllm:prompt_tokens",
                 "vllm:generation_tokens", "vllm:cache_config_info"):
        assert name in ours, name


def test_gpu_busy_seconds_sum_the_steps_durations() -> None:
    sched = EngineSpec("a100-80g", "7b", time_scale=0.01).scheduler()
    metrics = EngineMetrics(sched, "emulated-7b")
    sched.add(Sequence("a", 3000, 5, 0.0))
    steps = []
    while (batch := sched.schedule(sum(steps))) is not None:
        metrics.record(sched.complete(batch), batch.duration)
        steps.append(batch.duration)
    busy = [s.value for f in text_string_to_metric_families(metrics.render().decode())
            for s in f.samples if s.name == f"{OWN}gpu_busy_seconds_total"]
    assert len(steps) >= 5 and busy == [pytest.approx(sum(steps))]
