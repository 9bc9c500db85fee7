"""Building one engine's ``EngineSignals`` (``types.py``: fields, units, conventions) from one
poll, or two merged polls.

``missing`` names every signal the source expected and does not have, so ``name in missing``
⇔ ``getattr(signals, name) is None`` for each expected name. Parsers never raise into request
handling; an unreadable poll is simply a snapshot with everything missing.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace

from llmroute.types import EngineSignals

SIGNALS: tuple[str, ...] = (
    "running", "waiting", "kv_cache_usage", "kv_capacity_tokens",
    "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms",
    "prompt_tokens_total", "generation_tokens_total", "prefix_cache_queries_total",
    "prefix_cache_hits_total", "gen_throughput_tps",
    "idle_slots", "total_slots",
    "gpu_mem_used_bytes", "gpu_mem_free_bytes", "gpu_util",
    "gpu_temp_c", "gpu_mem_bw_util", "net_rtt_ms", "net_bytes_per_s",
    "loaded_models",
)
"""Every optional signal field of ``EngineSignals``, in declaration order."""

FRACTIONS: tuple[str, ...] = ("kv_cache_usage", "gpu_util", "gpu_mem_bw_util")
"""The signals that are fractions in [0, 1]."""


def build(source: str, taken_at: float, expected: tuple[str, ...],
          values: dict[str, object], rejected: tuple[str, ...] = ()) -> EngineSignals:
    """A snapshot with ``values`` set; ``missing`` = the ``expected`` names left None;
    ``rejected`` = the names whose reading was present but nonsense (left None too)."""
    signals = EngineSignals(taken_at, source, **values)  # type: ignore[arg-type]
    return replace(signals, missing=_absent(signals, expected), rejected=rejected)


def within(value: float | None, low: float, high: float) -> tuple[float | None, bool]:
    """``(value, False)`` when ``value`` is a finite number in [low, high]; ``(None, True)``
    when it is present but NaN, ±Inf or out of range (rejected: a unit change or a broken
    sensor); ``(None, False)`` when absent."""
    if value is None:
        return None, False
    if math.isfinite(value) and low <= value <= high:
        return value, False
    return None, True


def unreadable(source: str, taken_at: float, expected: tuple[str, ...]) -> EngineSignals:
    """The snapshot of a poll whose body could not be parsed: every expected name missing."""
    return build(source, taken_at, expected, {})


def merge(a: EngineSignals, b: EngineSignals) -> EngineSignals:
    """Combine two polls of one engine (e.g. llama.cpp ``/metrics`` + ``/slots``, or an engine
    + DCGM): each signal from ``a`` if present, else from ``b``. ``taken_at`` is the older of
    the two (the merged snapshot is as stale as its stalest part); ``source`` is ``a``'s;
    ``missing`` keeps the names either poll expected that are still None."""
    values = {name: _first(getattr(a, name), getattr(b, name)) for name in SIGNALS}
    expected = tuple(n for n in SIGNALS if n in a.missing or n in b.missing)
    rejected = tuple(dict.fromkeys(a.rejected + b.rejected))
    return build(a.source, min(a.taken_at, b.taken_at), expected, values, rejected)


def _first(x: object, y: object) -> object:
    return x if x is not None else y


def _absent(signals: EngineSignals, expected: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in SIGNALS if n in expected and getattr(signals, n) is None)


def signal_names() -> tuple[str, ...]:
    """The optional signal fields, read from the dataclass itself (a check on ``SIGNALS``)."""
    skip = {"taken_at", "source", "missing", "rejected"}
    return tuple(f.name for f in fields(EngineSignals) if f.name not in skip)
