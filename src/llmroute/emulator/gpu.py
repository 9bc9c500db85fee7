"""The emulated GPU as an NVIDIA DCGM exporter shows it: ``GET /dcgm/metrics`` on the
engine's port (a DCGM exporter runs beside every real engine; ``gpu: {dcgm_url: …}`` points
the router at it).

Per model second the step loop reports each step (``step``): the GPU was busy for its
duration, and its memory interface for the roofline's memory term of it
(``PerfModel.memory_time``). From that:

- ``DCGM_FI_DEV_GPU_UTIL`` (percent): the busy share, an exponentially weighted average
  over ``UTIL_TAU_S`` (DCGM samples utilisation over about a second);
- ``DCGM_FI_PROF_DRAM_ACTIVE`` (ratio 0–1): the memory-busy share, averaged the same way;
- ``DCGM_FI_DEV_GPU_TEMP`` (°C): Newton's law of cooling, a first-order lag towards a
  steady temperature between ``IDLE_C`` and ``LOAD_C`` in proportion to the busy share,
  with time constant ``TAU_S``; from the ``hot`` cue on (``cues.py``) the steady
  temperature runs ``hot_rise_c`` higher (a failed fan);
- ``DCGM_FI_DEV_FB_USED`` / ``FB_FREE`` (MiB): weights, the reserve and the KV blocks in
  use, against the GPUs' memory; one sample per GPU (tensor parallelism splits them evenly).

Constants (assumptions, from the ``nvidia-smi`` captures in ``shared/data/engine-metrics``:
an H100 80GB read 41 °C idle and 59 °C at 100 % utilisation, an H200 28 °C and 52 °C):
``IDLE_C`` = 40, ``LOAD_C`` = 60; ``TAU_S`` = 20 model seconds (a GPU die with its
heatsink settles within tens of seconds).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmroute.emulator.cues import Cues
from llmroute.emulator.perf import PerfModel
from llmroute.emulator.scheduler import Batch, Scheduler

IDLE_C = 40.0
LOAD_C = 60.0
TAU_S = 20.0
UTIL_TAU_S = 1.0
MIB = 1024 * 1024


class GpuState:
    """Busy share, memory-busy share and temperature of one engine's GPUs over model time
    (module docstring); ``scheduler`` gives the KV blocks in use."""

    def __init__(self, perf: PerfModel, scheduler: Scheduler, cues: Cues):
        self._perf, self._scheduler, self._cues = perf, scheduler, cues
        self._at = 0.0  # model time of the last update
        self.util = self.dram = 0.0
        self.temp_c = IDLE_C + (cues.hot_rise_c if cues.hot(0.0) else 0.0)  # hot from the start

    def step(self, batch: Batch) -> None:
        """A step ran from ``batch.start`` for ``batch.duration`` (call before the
        scheduler completes it: its sequences still hold their pre-step context)."""
        kv_read = sum(seq.computed + n for seq, n in batch.entries)
        memory = min(self._perf.memory_time(kv_read) / max(batch.duration, 1e-12), 1.0)
        self.advance(batch.start)
        self._spend(batch.duration, 1.0, memory)

    def advance(self, now: float) -> None:
        """Idle from the last update until model time ``now``."""
        if now > self._at:
            self._spend(now - self._at, 0.0, 0.0)

    def _spend(self, dt: float, busy: float, memory: float) -> None:
        keep = math.exp(-dt / UTIL_TAU_S)
        self.util = busy + (self.util - busy) * keep
        self.dram = memory * busy + (self.dram - memory * busy) * keep
        rise = self._cues.hot_rise_c if self._cues.hot(self._at + dt) else 0.0
        steady = IDLE_C + (LOAD_C - IDLE_C) * self.util + rise
        self.temp_c = steady + (self.temp_c - steady) * math.exp(-dt / TAU_S)
        self._at += dt

    def fb_used_bytes(self) -> int:
        """Framebuffer bytes in use across the GPUs: weights, reserve and KV blocks."""
        p, config = self._perf, self._scheduler.config
        kv = self._scheduler.used_blocks * config.block_size * p.model.kv_bytes_per_token
        return p.model.weight_bytes + p.gpus * p.reserve_bytes + kv


class DcgmView(Collector):
    """The DCGM exporter's families of one engine (module docstring), read at scrape time
    after advancing ``gpu`` to ``now()``."""

    def __init__(self, gpu: GpuState, perf: PerfModel, now: object, model_name: str):
        self._gpu, self._perf, self._now, self._name = gpu, perf, now, model_name

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One sample per GPU of each family."""
        self._gpu.advance(self._now())  # type: ignore[operator]
        g, p = self._gpu, self._perf
        total = p.gpu.memory_bytes
        used = g.fb_used_bytes() / p.gpus
        for name, doc, value in (
                ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", used / MIB),
                ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
                 max(total - used, 0.0) / MIB),
                ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", 100.0 * g.util),
                ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", g.temp_c),
                ("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is "
                 "active sending or receiving data.", g.dram)):
            family = GaugeMetricFamily(name, doc, labels=["gpu", "modelName"])
            for i in range(p.gpus):
                family.add_metric([str(i), self._name], round(value, 6))
            yield family


def render_dcgm(view: DcgmView) -> bytes:
    """The Prometheus text of ``view`` (a registry of its own per scrape: no shared state)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(view)
    return generate_latest(registry)
