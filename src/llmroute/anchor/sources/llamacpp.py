"""llama.cpp ``llama-server`` ``GET /metrics`` and ``GET /slots`` → ``EngineSignals``.

``/metrics`` (needs ``--metrics``; Prometheus text, no labels): ``llamacpp:requests_processing``
→ running, ``llamacpp:requests_deferred`` → waiting, ``llamacpp:kv_cache_usage_ratio`` →
KV usage (only builds before May 2025 emit it; newer ones, including the local 0.3.36 build
and b9014, do not, so it is normally missing), ``llamacpp:prompt_tokens_total`` and
``llamacpp:tokens_predicted_total`` (counters). The counters are updated when a request
*finishes*, not per token: mid-request they lag (the local busy capture shows
``tokens_predicted_total 0`` while a stream is running).

``/slots`` (needs ``--slots``; JSON list, one object per slot): total slots = list length,
idle slots = those with ``"is_processing": false``. Anything else (an error object, an empty
list, a slot without a boolean ``is_processing``) → both missing.

Poll both and ``merge`` the two snapshots. Nothing here raises.
"""

from __future__ import annotations

import json

from llmroute.anchor.sources import prom
from llmroute.anchor.sources.signals import build, merge, unreadable
from llmroute.types import EngineSignals

__all__ = ["parse_llamacpp_metrics", "parse_llamacpp_slots", "merge"]

SOURCE = "llamacpp"
METRICS_EXPECTED = ("running", "waiting", "kv_cache_usage", "prompt_tokens_total",
                    "generation_tokens_total")
SLOTS_EXPECTED = ("idle_slots", "total_slots")
METRICS_NAMES = ("llamacpp:requests_processing", "llamacpp:requests_deferred",
                 "llamacpp:kv_cache_usage_ratio", "llamacpp:prompt_tokens",
                 "llamacpp:tokens_predicted")
"""The metric families read (``prom.wanted``); the rest of a scrape is never parsed."""


def parse_llamacpp_metrics(text: str, taken_at: float) -> EngineSignals:
    """The signals in one ``/metrics`` body; ``taken_at`` is the caller's clock (s)."""
    samples = prom.read_samples(text, METRICS_NAMES)
    if samples is None:
        return unreadable(SOURCE, taken_at, METRICS_EXPECTED)
    return build(SOURCE, taken_at, METRICS_EXPECTED, {
        "running": prom.as_int(prom.gauge_sum(samples, "llamacpp:requests_processing")),
        "waiting": prom.as_int(prom.gauge_sum(samples, "llamacpp:requests_deferred")),
        "kv_cache_usage": prom.fraction(
            prom.gauge_mean(samples, "llamacpp:kv_cache_usage_ratio")),
        "prompt_tokens_total": prom.as_int(
            prom.gauge_sum(samples, "llamacpp:prompt_tokens_total")),
        "generation_tokens_total": prom.as_int(
            prom.gauge_sum(samples, "llamacpp:tokens_predicted_total")),
    })


def parse_llamacpp_slots(json_text: str, taken_at: float) -> EngineSignals:
    """Idle and total slots from one ``/slots`` body; ``taken_at`` is the caller's clock (s)."""
    busy = _busy_flags(json_text)
    if busy is None:
        return unreadable(SOURCE, taken_at, SLOTS_EXPECTED)
    return build(SOURCE, taken_at, SLOTS_EXPECTED,
                 {"idle_slots": busy.count(False), "total_slots": len(busy)})


def _busy_flags(json_text: str) -> list[bool] | None:
    try:
        slots = json.loads(json_text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return None
    if not isinstance(slots, list) or not slots:
        return None
    flags = [s.get("is_processing") if isinstance(s, dict) else None for s in slots]
    return flags if all(isinstance(f, bool) for f in flags) else None
