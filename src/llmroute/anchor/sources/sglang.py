"""SGLang ``GET /metrics`` (Prometheus text) → ``EngineSignals``.

Names (real-looking docs capture of ~v0.3.5 under heavy load, and a hand-curated v0.5.10
fixture): ``sglang:num_running_reqs``, ``sglang:num_queue_reqs`` (gauges),
``sglang:token_usage`` (fraction 0–1 of the KV token pool in use),
``sglang:gen_throughput`` (tokens/s, the scheduler's recent decode throughput),
histograms ``sglang:time_to_first_token_seconds`` and ``sglang:time_per_output_token_seconds``
(old) / ``sglang:inter_token_latency_seconds`` (new), counters ``sglang:prompt_tokens_total``
and ``sglang:generation_tokens_total``.

Label sets (``model_name``, newer ``tp_rank``/``pp_rank``/``dp_rank``/``engine_type``) are
summed, except that sets differing only in ``tp_rank`` count once (by their maximum), so
tensor-parallel ranks that each report the same scheduler are not double-counted; the
token-usage fraction is averaged. Unparseable text → everything missing; nothing raises.
"""

from __future__ import annotations

from llmroute.anchor.sources import prom
from llmroute.anchor.sources.signals import build, unreadable
from llmroute.types import EngineSignals

SOURCE = "sglang"
EXPECTED = ("running", "waiting", "kv_cache_usage", "ttft_p50_ms", "ttft_p95_ms",
            "tpot_p50_ms", "prompt_tokens_total", "generation_tokens_total",
            "gen_throughput_tps")
TTFT = ("sglang:time_to_first_token_seconds",)
TPOT = ("sglang:time_per_output_token_seconds", "sglang:inter_token_latency_seconds")
COLLAPSE = ("tp_rank",)
NAMES = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
         "sglang:gen_throughput", *TTFT, *TPOT, "sglang:prompt_tokens",
         "sglang:generation_tokens")
"""The metric families read (``prom.wanted``); the rest of a scrape is never parsed."""


def _count(samples: prom.Samples, name: str) -> int | None:
    return prom.as_int(prom.gauge_sum(samples, name, collapse=COLLAPSE))


def parse_sglang_metrics(text: str, taken_at: float) -> EngineSignals:
    """The signals in one SGLang ``/metrics`` body; ``taken_at`` is the caller's clock (s)."""
    samples = prom.read_samples(text, NAMES)
    if samples is None:
        return unreadable(SOURCE, taken_at, EXPECTED)
    return build(SOURCE, taken_at, EXPECTED, {
        "running": _count(samples, "sglang:num_running_reqs"),
        "waiting": _count(samples, "sglang:num_queue_reqs"),
        "kv_cache_usage": prom.fraction(prom.gauge_mean(samples, "sglang:token_usage")),
        "gen_throughput_tps": prom.gauge_sum(samples, "sglang:gen_throughput",
                                             collapse=COLLAPSE),
        "ttft_p50_ms": prom.quantile_ms(samples, TTFT, 0.50),
        "ttft_p95_ms": prom.quantile_ms(samples, TTFT, 0.95),
        "tpot_p50_ms": prom.quantile_ms(samples, TPOT, 0.50),
        "prompt_tokens_total": _count(samples, "sglang:prompt_tokens_total"),
        "generation_tokens_total": _count(samples, "sglang:generation_tokens_total"),
    })
