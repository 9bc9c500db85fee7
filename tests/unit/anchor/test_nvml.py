"""NVML source: device readings through a stand-in of the ``pynvml`` module's API, and an
absent library/driver as absent signals."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

from llmroute.anchor.sources.nvml import NvmlSource, read_device


class FakeNvml:
    """The four pynvml calls the source uses, over one 80 GB device at index 0 at
    ``celsius`` °C (a reading in kelvin is a unit change) and ``memory`` % memory use."""

    NVMLError = pynvml.NVMLError
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(self, celsius: float = 64.0, memory: float = 10.0):
        self.celsius, self.memory = celsius, memory

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802 - pynvml's names
        if index != 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return "h0"

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        return SimpleNamespace(total=80 * 2**30, free=60 * 2**30, used=20 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        return SimpleNamespace(gpu=37, memory=self.memory)

    def nvmlDeviceGetTemperature(self, handle, sensor):  # noqa: N802
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self.celsius


def test_read_device():
    assert read_device(FakeNvml(), 0) == {
        "gpu_mem_used_bytes": 20 * 2**30, "gpu_mem_free_bytes": 60 * 2**30, "gpu_util": 0.37,
        "gpu_temp_c": 64.0, "gpu_mem_bw_util": 0.10, "rejected": ()}


@pytest.mark.parametrize("celsius,memory,rejected", [
    (337.15, 10.0, ("gpu_temp_c",)), (-3.0, 10.0, ("gpu_temp_c",)),
    (float("nan"), 250.0, ("gpu_temp_c", "gpu_mem_bw_util"))],
    ids=["kelvin", "negative", "nan-and-percent-over-100"])
def test_nonsense_readings_are_rejected_not_used(celsius, memory, rejected):
    got = read_device(FakeNvml(celsius, memory), 0)
    assert got["rejected"] == rejected
    assert all(got[name] is None for name in rejected) and got["gpu_util"] == 0.37


def test_bad_index_is_missing():
    assert read_device(FakeNvml(), 3) is None


def test_source_reads_through_nvml_or_reports_missing():
    source = NvmlSource(0)
    got = source.read(5.0)
    source.close()
    assert got.taken_at == 5.0 and got.source == "nvml"
    if got.gpu_util is None:  # no NVIDIA driver here: absent, not an error
        assert set(got.missing) == {"gpu_mem_used_bytes", "gpu_mem_free_bytes", "gpu_util",
                                    "gpu_temp_c", "gpu_mem_bw_util"}
    else:
        assert got.gpu_mem_free_bytes > 0 and 0.0 <= got.gpu_util <= 1.0
