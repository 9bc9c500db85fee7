"""The performance model: how long one scheduler step takes, and how many tokens of KV cache
fit, for a model on a GPU (or ``gpus`` GPUs with tensor parallelism).

One step of continuous batching runs a forward pass over every scheduled token: one per
decoding sequence plus the prefill chunks. Its time follows the roofline model (Williams,
Waterman, Patterson, "Roofline", CACM 2009; applied to LLM inference by Yuan et al., "LLM
Inference Unveiled: Survey and Roofline Model Insights", 2024)::

    flops   = Σ_tokens (2·N + 2·L·ctx·d)          Kaplan et al. 2020, Table 1 (C_forward)
    bytes   = weight_bytes + kv_bytes_per_token · Σ_seq ctx_seq
    t_step  = max(flops / (G·F·η_c), bytes / (G·B·η_m)) + t_overhead

N parameters, L layers, d attention width, ctx the tokens already in the sequence's context
when the token is computed, G GPUs, F dense FLOP/s and B bytes/s per GPU (datasheets, see
``hardware``). Prefill (many tokens, weights read once) is compute-bound and grows with the
prompt; a decode step (one token per sequence) is bound by reading the weights and every
running sequence's KV cache, so it grows with the batch size and the context lengths.

Assumptions (not from a datasheet; chosen to match commonly reported vLLM figures, e.g. a
7B model on one A100 decoding at ~12 ms/token at batch 1):

- η_c = 0.5 model FLOPs utilisation, η_m = 0.7 memory-bandwidth utilisation (MBU as defined
  in Databricks, "LLM Inference Performance Engineering: Best Practices", 2023, which
  reports 60–70 % MBU for 7B models on A100s at small batch);
- t_overhead = 3 ms per step (scheduling, sampling, kernel launches);
- tensor parallelism scales F, B and memory linearly (communication is not modelled);
- KV cache = G · memory · ``gpu_memory_utilization`` (0.9, vLLM's default) − weights −
  ``reserve_bytes`` (1.5 GB per GPU for activations, CUDA graphs and the CUDA context).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmroute.emulator.hardware import GB, GpuProfile, ModelSize


@dataclass(frozen=True, slots=True)
class PerfModel:
    """Step times (seconds) and KV capacity (tokens) of ``model`` on ``gpus`` × ``gpu``."""

    gpu: GpuProfile
    model: ModelSize
    gpus: int = 1
    compute_efficiency: float = 0.5
    bandwidth_efficiency: float = 0.7
    step_overhead_s: float = 0.003
    gpu_memory_utilization: float = 0.9
    reserve_bytes: int = int(1.5 * GB)

    def kv_capacity_bytes(self) -> int:
        """Bytes left for the KV cache. Raises ValueError when the weights do not fit."""
        budget = self.gpus * (self.gpu.memory_bytes * self.gpu_memory_utilization
                              - self.reserve_bytes)
        free = int(budget) - self.model.weight_bytes
        if free <= 0:
            raise ValueError(f"{self.model.name} ({self.model.weight_bytes / GB:.1f} GB of "
                             f"weights) does not fit on {self.gpus} × {self.gpu.name}")
        return free

    def kv_capacity_tokens(self, block_size: int = 16) -> int:
        """Tokens of KV cache, rounded down to whole blocks of ``block_size`` tokens."""
        tokens = self.kv_capacity_bytes() // self.model.kv_bytes_per_token
        return tokens // block_size * block_size

    def token_flops(self, ctx: int) -> float:
        """Forward FLOPs of one token whose context already holds ``ctx`` tokens."""
        return 2.0 * self.model.params + 2.0 * self.model.layers * ctx * self.model.hidden

    def chunk_flops(self, start: int, length: int) -> float:
        """Forward FLOPs of ``length`` tokens at context positions start … start+length−1
        (the attention term summed in closed form)."""
        ctx_sum = length * start + length * (length - 1) / 2
        return (2.0 * self.model.params * length
                + 2.0 * self.model.layers * self.model.hidden * ctx_sum)

    def step_time(self, flops: float, kv_tokens_read: int) -> float:
        """Seconds for one step doing ``flops`` of compute and reading the weights plus
        ``kv_tokens_read`` tokens of KV cache."""
        compute = flops / (self.gpus * self.gpu.flops * self.compute_efficiency)
        return max(compute, self.memory_time(kv_tokens_read)) + self.step_overhead_s

    def memory_time(self, kv_tokens_read: int) -> float:
        """Seconds the memory interface is busy in a step reading the weights plus
        ``kv_tokens_read`` tokens of KV cache (the roofline's memory term)."""
        read = self.model.weight_bytes + self.model.kv_bytes_per_token * kv_tokens_read
        return read / (self.gpus * self.gpu.bandwidth_bps * self.bandwidth_efficiency)

    def decode_step_time(self, batch: int, ctx: int) -> float:
        """Seconds for a decode step of ``batch`` sequences, each with ``ctx`` tokens."""
        return self.step_time(batch * self.token_flops(ctx), batch * ctx)

    def prefill_time(self, prompt_tokens: int, chunk: int) -> float:
        """Seconds to prefill ``prompt_tokens`` alone on an idle engine in chunks of at most
        ``chunk`` tokens (the time to first token without queueing)."""
        total, done = 0.0, 0
        while done < prompt_tokens:
            n = min(chunk, prompt_tokens - done)
            total += self.step_time(self.chunk_flops(done, n), done + n)
            done += n
        return total
