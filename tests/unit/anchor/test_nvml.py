"""NVML source: device readings through a stand-in of the ``pynvml`` module's API, and an
absent library/driver as absent signals."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml

from llmroute.anchor.sources.nvml import NvmlSource, read_device


class FakeNvml:
    """The three pynvml calls the source uses, over one 80 GB device at index 0."""

    NVMLError = pynvml.NVMLError

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802 - pynvml's names
        if index != 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return "h0"

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        return SimpleNamespace(total=80 * 2**30, free=60 * 2**30, used=20 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        return SimpleNamespace(gpu=37, memory=10)


def test_read_device():
    assert read_device(FakeNvml(), 0) == {"gpu_mem_used_bytes": 20 * 2**30,
                                          "gpu_mem_free_bytes": 60 * 2**30, "gpu_util": 0.37}


def test_bad_index_is_missing():
    assert read_device(FakeNvml(), 3) is None


def test_source_reads_through_nvml_or_reports_missing():
    source = NvmlSource(0)
    got = source.read(5.0)
    source.close()
    assert got.taken_at == 5.0 and got.source == "nvml"
    if got.gpu_util is None:  # no NVIDIA driver here: absent, not an error
        assert set(got.missing) == {"gpu_mem_used_bytes", "gpu_mem_free_bytes", "gpu_util"}
    else:
        assert got.gpu_mem_free_bytes > 0 and 0.0 <= got.gpu_util <= 1.0
