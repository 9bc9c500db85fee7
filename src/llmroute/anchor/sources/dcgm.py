"""NVIDIA DCGM exporter ``GET /metrics`` (Prometheus text) → GPU memory, utilisation,
temperature and memory-bandwidth use.

- ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE``: framebuffer memory in MiB (the
  exporter's HELP text says "in MiB"); converted to bytes (× 1,048,576) and **summed**
  across GPUs, so a multi-GPU engine reports its total.
- ``DCGM_FI_DEV_GPU_UTIL``: utilisation in percent (0–100); converted to a fraction and
  **averaged** across GPUs (a value above 100 is rejected as missing).
- ``DCGM_FI_DEV_GPU_TEMP``: GPU temperature in °C (the exporter's HELP: "GPU temperature
  (in C)."); the **hottest** GPU's, since one hot GPU throttles a tensor-parallel engine.
  A reading outside ``TEMP_RANGE_C`` (0–130 °C: a negative value, NaN, or a unit change
  such as kelvin) is rejected.
- ``DCGM_FI_PROF_DRAM_ACTIVE``: the ratio (0–1) of cycles the device memory interface is
  active (DCGM's profiling field 1005: memory-bandwidth utilisation), **averaged** across
  GPUs; without it ``DCGM_FI_DEV_MEM_COPY_UTIL`` (percent, 0–100: the share of the sample
  period memory was read or written, NVML's memory utilisation), as a fraction. A ratio
  above 1 (a percentage where a ratio belongs) or a percentage above 100 is rejected.

Rejected readings are None and named in ``rejected`` (the collector counts them). The
names are those of the exporter captures in ``shared/data/engine-metrics`` (L4, L40S, a
vGPU A100 whose short counter set has neither temperature nor DRAM_ACTIVE).

``gpu`` (the exporter's ``gpu`` label, e.g. ``"0"``) restricts every field to one device.
Unparseable text → everything missing; nothing raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from llmroute.anchor.sources import prom
from llmroute.anchor.sources.signals import build, unreadable, within
from llmroute.types import EngineSignals

SOURCE = "dcgm"
EXPECTED = ("gpu_mem_used_bytes", "gpu_mem_free_bytes", "gpu_util", "gpu_temp_c",
            "gpu_mem_bw_util")
MIB = 1024 * 1024
TEMP_RANGE_C = (0.0, 130.0)
"""Plausible GPU temperatures, °C: NVIDIA parts throttle and shut down around 85–105 °C; a
reading above 130 is a unit change (kelvin reads ≈ 300) or a sensor fault, and a negative
one is nonsense in a data centre."""
NAMES = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL",
         "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_MEM_COPY_UTIL")
"""The metric families read (``prom.wanted``); the rest of a scrape is never parsed."""

Reduce = Callable[[list[float]], float]


def parse_dcgm(text: str, taken_at: float, gpu: str | None = None) -> EngineSignals:
    """GPU signals from one DCGM-exporter body; ``taken_at`` is the caller's clock (s)."""
    samples = prom.read_samples(text, NAMES)
    if samples is None:
        return unreadable(SOURCE, taken_at, EXPECTED)
    where = {"gpu": gpu} if gpu is not None else None
    util = prom.gauge_mean(samples, "DCGM_FI_DEV_GPU_UTIL", where=where)
    temp, hot_bad = _checked(samples, "DCGM_FI_DEV_GPU_TEMP", where, TEMP_RANGE_C, max)
    bandwidth, bw_bad = _bandwidth(samples, where)
    rejected = tuple(n for n, bad in (("gpu_temp_c", hot_bad), ("gpu_mem_bw_util", bw_bad))
                     if bad)
    return build(SOURCE, taken_at, EXPECTED, {
        "gpu_mem_used_bytes": _bytes(prom.gauge_sum(samples, "DCGM_FI_DEV_FB_USED", where=where)),
        "gpu_mem_free_bytes": _bytes(prom.gauge_sum(samples, "DCGM_FI_DEV_FB_FREE", where=where)),
        "gpu_util": prom.fraction(util / 100.0 if util is not None else None),
        "gpu_temp_c": temp, "gpu_mem_bw_util": bandwidth,
    }, rejected)


def _bandwidth(samples: prom.Samples, where: Mapping[str, str] | None
               ) -> tuple[float | None, bool]:
    """``(fraction, rejected)``: ``DRAM_ACTIVE`` (a ratio), else ``MEM_COPY_UTIL`` (percent)."""
    if prom.select(samples, "DCGM_FI_PROF_DRAM_ACTIVE", where):
        return _checked(samples, "DCGM_FI_PROF_DRAM_ACTIVE", where, (0.0, 1.0), _mean)
    percent, bad = _checked(samples, "DCGM_FI_DEV_MEM_COPY_UTIL", where, (0.0, 100.0), _mean)
    return (None if percent is None else percent / 100.0), bad


def _checked(samples: prom.Samples, name: str, where: Mapping[str, str] | None,
             bounds: tuple[float, float], reduce: Reduce) -> tuple[float | None, bool]:
    """``(reduce(values), False)`` over ``name``'s samples when every one is a finite
    number within ``bounds``; ``(None, True)`` when any is not (rejected); ``(None,
    False)`` when there is none."""
    values = [float(s.value) for s in prom.select(samples, name, where)]
    if not values:
        return None, False
    checked = [within(v, *bounds) for v in values]
    if any(bad for _, bad in checked):
        return None, True
    return reduce([v for v, _ in checked if v is not None]), False


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _bytes(mib: float | None) -> int | None:
    return prom.as_int(mib * MIB if mib is not None else None)
