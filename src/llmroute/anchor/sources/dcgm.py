"""NVIDIA DCGM exporter ``GET /metrics`` (Prometheus text) → GPU memory and utilisation.

- ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE``: framebuffer memory in MiB (the
  exporter's HELP text says "in MiB"); converted to bytes (× 1,048,576) and **summed**
  across GPUs, so a multi-GPU engine reports its total.
- ``DCGM_FI_DEV_GPU_UTIL``: utilisation in percent (0–100); converted to a fraction and
  **averaged** across GPUs (a value above 100 is rejected as missing).

``gpu`` (the exporter's ``gpu`` label, e.g. ``"0"``) restricts all three to one device.
Unparseable text → everything missing; nothing raises.
"""

from __future__ import annotations

from llmroute.anchor.sources import prom
from llmroute.anchor.sources.signals import build, unreadable
from llmroute.types import EngineSignals

SOURCE = "dcgm"
EXPECTED = ("gpu_mem_used_bytes", "gpu_mem_free_bytes", "gpu_util")
MIB = 1024 * 1024


def parse_dcgm(text: str, taken_at: float, gpu: str | None = None) -> EngineSignals:
    """GPU signals from one DCGM-exporter body; ``taken_at`` is the caller's clock (s)."""
    samples = prom.read_samples(text)
    if samples is None:
        return unreadable(SOURCE, taken_at, EXPECTED)
    where = {"gpu": gpu} if gpu is not None else None
    util = prom.gauge_mean(samples, "DCGM_FI_DEV_GPU_UTIL", where=where)
    return build(SOURCE, taken_at, EXPECTED, {
        "gpu_mem_used_bytes": _bytes(prom.gauge_sum(samples, "DCGM_FI_DEV_FB_USED", where=where)),
        "gpu_mem_free_bytes": _bytes(prom.gauge_sum(samples, "DCGM_FI_DEV_FB_FREE", where=where)),
        "gpu_util": prom.fraction(util / 100.0 if util is not None else None),
    })


def _bytes(mib: float | None) -> int | None:
    return prom.as_int(mib * MIB if mib is not None else None)
