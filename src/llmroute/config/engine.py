"""A backend's engine-side sections of the configuration: ``launch`` (a local llama.cpp
engine llmroute starts itself, ``local/``) and ``gpu`` (where its GPU signals come from)."""

from __future__ import annotations

from pydantic import Field, model_validator

from llmroute.config.base import Strict


class LaunchConfig(Strict):
    """A local llama.cpp engine llmroute starts itself: ``ctx_size`` tokens of KV cache shared
    by ``slots`` parallel sequences, ``threads`` CPU threads."""

    ctx_size: int = Field(4096, ge=256)
    slots: int = Field(1, ge=1, le=64)
    threads: int = Field(1, ge=1)
    extra_args: tuple[str, ...] = ()


class GpuConfig(Strict):
    """Where a backend's GPU signals come from: ``nvml_index`` (a GPU on the router's host,
    read through NVML) or ``dcgm_url`` (a remote DCGM exporter's ``/metrics``; ``gpu`` is
    its ``gpu`` label, e.g. ``"0"``; all GPUs summed when omitted)."""

    nvml_index: int | None = Field(None, ge=0)
    dcgm_url: str | None = Field(None, pattern=r"^https?://")
    gpu: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> GpuConfig:
        if (self.nvml_index is None) == (self.dcgm_url is None):
            raise ValueError("give exactly one of nvml_index or dcgm_url")
        return self
