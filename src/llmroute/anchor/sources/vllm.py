"""vLLM ``GET /metrics`` (Prometheus text) → ``EngineSignals``.

Names (checked against real captures of the V0 engine, ~0.5 and ~0.7, and the V1 engine,
0.20.2rc1, in ``/work/shared/data/engine-metrics``):

- ``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` (gauges).
- KV cache usage: ``vllm:kv_cache_usage_perc`` (V1) or ``vllm:gpu_cache_usage_perc`` (V0).
  Both are fractions 0–1 despite "perc" (V1 scrape shows 0.38235294117647056 with one
  request running on a 35-block cache, i.e. 13/34).
- TTFT: histogram ``vllm:time_to_first_token_seconds``.
- TPOT: histogram ``vllm:time_per_output_token_seconds`` (V0, early V1), else
  ``vllm:inter_token_latency_seconds`` (its V1 successor; same meaning, per token gap).
- ``vllm:prompt_tokens_total`` / ``vllm:generation_tokens_total`` (counters).
- KV capacity: the labels ``num_gpu_blocks`` × ``block_size`` of the info gauge
  ``vllm:cache_config_info`` (tokens per engine; the largest when engines differ).
- Prefix cache: the V1 counters ``vllm:prefix_cache_queries_total`` and
  ``vllm:prefix_cache_hits_total`` (tokens; 0.20.2rc1 scrape). Optional: V0 engines export
  a hit-rate gauge instead, and an engine without prefix caching may leave them out.

Gauges and counters are summed across label sets (``engine`` for data-parallel engines,
``model_name``); the KV fraction is averaged across them (each engine has its own cache of
the same size); histograms are summed by ``le``. A body that does not parse gives a snapshot
with everything missing (see ``signals``); nothing raises.
"""

from __future__ import annotations

from llmroute.anchor.sources import prom
from llmroute.anchor.sources.signals import build, unreadable
from llmroute.types import EngineSignals

SOURCE = "vllm"
EXPECTED = ("running", "waiting", "kv_cache_usage", "kv_capacity_tokens", "ttft_p50_ms",
            "ttft_p95_ms", "tpot_p50_ms", "prompt_tokens_total", "generation_tokens_total")
KV_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
TTFT = ("vllm:time_to_first_token_seconds",)
TPOT = ("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds")
NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting", *KV_NAMES,
         "vllm:cache_config_info", *TTFT, *TPOT, "vllm:prompt_tokens", "vllm:generation_tokens",
         "vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
"""The metric families read (``prom.wanted``); the rest of a scrape is never parsed."""


def parse_vllm_metrics(text: str, taken_at: float) -> EngineSignals:
    """The signals in one vLLM ``/metrics`` body; ``taken_at`` is the caller's clock (s)."""
    samples = prom.read_samples(text, NAMES)
    if samples is None:
        return unreadable(SOURCE, taken_at, EXPECTED)
    return build(SOURCE, taken_at, EXPECTED, {
        "running": prom.as_int(prom.gauge_sum(samples, "vllm:num_requests_running")),
        "waiting": prom.as_int(prom.gauge_sum(samples, "vllm:num_requests_waiting")),
        "kv_cache_usage": prom.fraction(prom.first_present(samples, KV_NAMES, prom.gauge_mean)),
        "kv_capacity_tokens": kv_capacity_tokens(samples),
        "ttft_p50_ms": prom.quantile_ms(samples, TTFT, 0.50),
        "ttft_p95_ms": prom.quantile_ms(samples, TTFT, 0.95),
        "tpot_p50_ms": prom.quantile_ms(samples, TPOT, 0.50),
        "prompt_tokens_total": prom.as_int(prom.gauge_sum(samples, "vllm:prompt_tokens_total")),
        "generation_tokens_total": prom.as_int(
            prom.gauge_sum(samples, "vllm:generation_tokens_total")),
        "prefix_cache_queries_total": prom.as_int(
            prom.gauge_sum(samples, "vllm:prefix_cache_queries_total")),
        "prefix_cache_hits_total": prom.as_int(
            prom.gauge_sum(samples, "vllm:prefix_cache_hits_total")),
    })


def kv_capacity_tokens(samples: prom.Samples) -> int | None:
    """KV-cache size in tokens from ``vllm:cache_config_info{num_gpu_blocks, block_size}``:
    blocks × tokens per block, the largest over engines; None when the gauge or either label
    is absent or not a positive integer (e.g. ``num_gpu_blocks="None"`` before profiling)."""
    sizes = [_positive(s.labels.get("num_gpu_blocks")) * _positive(s.labels.get("block_size"))
             for s in prom.select(samples, "vllm:cache_config_info")]
    return max(sizes) if sizes and min(sizes) > 0 else None


def _positive(label: str | None) -> int:
    """A label's value as a positive int; 0 when absent or not one."""
    try:
        n = int(label) if label is not None else 0
    except ValueError:
        return 0
    return n if n > 0 else 0
