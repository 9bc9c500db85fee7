"""GPUs on the router's host through NVML (``nvidia-ml-py``, imported as ``pynvml``).

Reads framebuffer memory (``nvmlDeviceGetMemoryInfo``: total/free/used, bytes),
utilisation (``nvmlDeviceGetUtilizationRates()``: ``.gpu``, percent of the last sample
period during which a kernel ran; ``.memory``, percent of it during which device memory was
read or written — the memory-bandwidth use) and the die temperature
(``nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU)``, °C) of one device. A
temperature or memory utilisation outside its range (``dcgm.TEMP_RANGE_C``, 0–100 %) is
rejected (None, named in ``rejected``). An absent GPU is an absent signal, never an error:
no driver, no library, a bad index or any NVML failure gives a snapshot with the GPU
signals missing. NVML is initialised on the first poll (no import-time work) and shut down
by ``close``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llmroute.anchor.sources.dcgm import EXPECTED, TEMP_RANGE_C
from llmroute.anchor.sources.signals import build, unreadable, within
from llmroute.types import Backend, EngineSignals

SOURCE = "nvml"
__all__ = ["EXPECTED", "NvmlSource", "read_device"]


def read_device(nvml: Any, index: int) -> dict[str, object] | None:
    """The GPU signal values of device ``index`` via the ``nvml`` module, with the names of
    the rejected readings under ``"rejected"``; None if NVML fails (``nvml.NVMLError``)."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        util = nvml.nvmlDeviceGetUtilizationRates(handle)
        temp = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
    except nvml.NVMLError:
        return None
    celsius, hot_bad = within(float(temp), *TEMP_RANGE_C)
    percent, bw_bad = within(float(util.memory), 0.0, 100.0)
    return {"gpu_mem_used_bytes": int(mem.used), "gpu_mem_free_bytes": int(mem.free),
            "gpu_util": min(max(float(util.gpu) / 100.0, 0.0), 1.0),
            "gpu_temp_c": celsius,
            "gpu_mem_bw_util": None if percent is None else percent / 100.0,
            "rejected": tuple(n for n, bad in (("gpu_temp_c", hot_bad),
                                               ("gpu_mem_bw_util", bw_bad)) if bad)}


class NvmlSource:
    """One local GPU by NVML ``index``; ``poll`` never raises."""

    def __init__(self, index: int):
        self.index = index
        self._nvml: Any = None
        self._failed = False

    def _load(self) -> Any:
        if self._nvml is not None or self._failed:
            return self._nvml
        try:
            import pynvml
        except ImportError:
            self._failed = True
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:  # no driver / library: the GPU signals stay absent
            self._failed = True
            return None
        self._nvml = pynvml
        return pynvml

    def read(self, now: float) -> EngineSignals:
        """The device's signals at ``now`` (synchronous; NVML calls take microseconds)."""
        nvml = self._load()
        values = read_device(nvml, self.index) if nvml is not None else None
        if values is None:
            return unreadable(SOURCE, now, EXPECTED)
        rejected = values.pop("rejected")
        return build(SOURCE, now, EXPECTED, values, rejected)  # type: ignore[arg-type]

    async def poll(self, backend: Backend, now: float) -> EngineSignals:
        """``read`` off the event loop."""
        return await asyncio.to_thread(self.read, now)

    def close(self) -> None:
        """Shut NVML down if this source initialised it."""
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None
