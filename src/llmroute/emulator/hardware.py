"""GPU profiles and model sizes the performance model is built from (public specifications).

GPUs (dense tensor-core throughput; datasheets quote 2× "with sparsity", which inference
does not use):

- ``a100-80g``: NVIDIA A100 80GB SXM — 80 GB HBM2e, 2,039 GB/s, BF16 312 TFLOPS.
  NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf).
- ``h100``: NVIDIA H100 SXM5 80GB — 80 GB HBM3, 3.35 TB/s, BF16 989 TFLOPS (1,979 sparse).
  NVIDIA H100 Tensor Core GPU datasheet (nvidia-h100-datasheet, 2023).
- ``h200``: NVIDIA H200 SXM — 141 GB HBM3e, 4.8 TB/s, BF16 989 TFLOPS (1,979 sparse).
  NVIDIA H200 Tensor Core GPU datasheet (2024).
- ``l4``: NVIDIA L4 — 24 GB GDDR6, 300 GB/s, BF16 121 TFLOPS (242 sparse).
  NVIDIA L4 Tensor Core GPU datasheet (2023).
- ``t4``: NVIDIA T4 — 16 GB GDDR6, 320 GB/s, FP16 65 TFLOPS (mixed precision; no BF16).
  NVIDIA T4 Tensor Core GPU datasheet (t4-tensor-core-datasheet-951643.pdf).

Memory sizes are taken as decimal gigabytes (1 GB = 10⁹ bytes), which slightly
under-states the usable memory and so the KV cache.

Models (16-bit weights; parameter counts from the released checkpoints, layer shapes from
each model's Hugging Face ``config.json``):

- ``1b``: Llama-3.2-1B — 1,235,814,400 params, 16 layers, hidden 2048, 8 KV heads × 64.
- ``7b``: Llama-2-7b — 6,738,415,616 params, 32 layers, hidden 4096, 32 KV heads × 128.
- ``8b``: Llama-3.1-8B — 8,030,261,248 params, 32 layers, hidden 4096, 8 KV heads × 128.
- ``13b``: Llama-2-13b — 13,015,864,320 params, 40 layers, hidden 5120, 40 KV heads × 128.
- ``70b``: Llama-2-70b — 68,976,648,192 params, 80 layers, hidden 8192, 8 KV heads × 128.

KV bytes per token = 2 (K and V) × layers × KV heads × head dim × 2 bytes (vLLM's
``kv_cache_spec`` page size per token for an fp16/bf16 cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

GB = 10**9


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """One GPU: ``memory_bytes`` (bytes), ``bandwidth_bps`` (bytes/s), ``flops`` (dense
    16-bit tensor FLOP/s)."""

    name: str
    memory_bytes: int
    bandwidth_bps: float
    flops: float


@dataclass(frozen=True, slots=True)
class ModelSize:
    """One decoder-only transformer: ``params`` (count), ``layers``, ``hidden`` (query
    width, for the attention FLOPs), ``kv_width`` (KV heads × head dim), ``dtype_bytes``."""

    name: str
    params: int
    layers: int
    hidden: int
    kv_width: int
    dtype_bytes: int = 2

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights: params × dtype bytes."""
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache per token: 2 × layers × kv_width × dtype bytes."""
        return 2 * self.layers * self.kv_width * self.dtype_bytes


def gpu_profiles() -> dict[str, GpuProfile]:
    """Every known GPU profile by name (see the module docstring for the datasheets)."""
    return {g.name: g for g in (
        GpuProfile("a100-80g", 80 * GB, 2039e9, 312e12),
        GpuProfile("h100", 80 * GB, 3350e9, 989e12),
        GpuProfile("h200", 141 * GB, 4800e9, 989e12),
        GpuProfile("l4", 24 * GB, 300e9, 121e12),
        GpuProfile("t4", 16 * GB, 320e9, 65e12),
    )}


def model_sizes() -> dict[str, ModelSize]:
    """Every known model size by name (see the module docstring for the checkpoints)."""
    return {m.name: m for m in (
        ModelSize("1b", 1_235_814_400, 16, 2048, 8 * 64),
        ModelSize("7b", 6_738_415_616, 32, 4096, 32 * 128),
        ModelSize("8b", 8_030_261_248, 32, 4096, 8 * 128),
        ModelSize("13b", 13_015_864_320, 40, 5120, 40 * 128),
        ModelSize("70b", 68_976_648_192, 80, 8192, 8 * 128),
    )}


def gpu_profile(name: str) -> GpuProfile:
    """The GPU profile called ``name``. Raises ValueError naming the known ones."""
    return _lookup(gpu_profiles(), name, "GPU profile")


def model_size(name: str) -> ModelSize:
    """The model size called ``name``. Raises ValueError naming the known ones."""
    return _lookup(model_sizes(), name, "model size")


def _lookup(table: dict[str, T], name: str, what: str) -> T:
    if name not in table:
        raise ValueError(f"unknown {what} {name!r} (known: {', '.join(table)})")
    return table[name]
