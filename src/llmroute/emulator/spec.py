"""What one emulated engine is: hardware, model, scheduler limits and the time scale."""

from __future__ import annotations

from dataclasses import dataclass

from llmroute.emulator.cues import Cues
from llmroute.emulator.hardware import gpu_profile, model_size
from llmroute.emulator.perf import PerfModel
from llmroute.emulator.scheduler import Scheduler, SchedulerConfig


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One emulated engine.

    ``profile`` and ``model_size`` name entries of ``hardware``; ``gpus`` GPUs serve it with
    tensor parallelism. ``time_scale`` is wall seconds per model second (0.1 runs ten times
    faster than the emulated hardware, 2 half as fast). ``stream_interval`` is the number of
    tokens per streamed chunk after the first (vLLM ``--stream-interval``).
    ``max_model_len`` (tokens) defaults to 32768 and is capped by the KV cache;
    ``served_model`` defaults to ``emulated-<model_size>``. ``prefix_caching`` (on, as in
    vLLM V1) reuses cached prompt blocks (``emulator/prefix.py``); ``kv_events`` is the
    ZeroMQ endpoint its KV-cache events are published on, as vLLM's ``--kv-events-config``
    (e.g. ``tcp://127.0.0.1:5557``, or ``tcp://127.0.0.1:*`` for a free port; None: not
    published; ``emulator/kv_publish.py``); ``cues`` say when and how it misbehaves
    (``cues.py``: degraded answers, a hot GPU, a slow link; none by default).
    """

    profile: str = "a100-80g"
    model_size: str = "7b"
    gpus: int = 1
    time_scale: float = 1.0
    max_num_seqs: int = 256
    max_batched_tokens: int = 4096
    block_size: int = 16
    max_model_len: int = 32768
    max_waiting: int | None = None
    stream_interval: int = 1
    served_model: str | None = None
    seed: int = 0
    prefix_caching: bool = True
    kv_events: str | None = None
    cues: Cues = Cues()

    def __post_init__(self) -> None:
        if self.time_scale <= 0 or self.gpus < 1 or self.stream_interval < 1:
            raise ValueError("time_scale must be > 0, gpus and stream_interval ≥ 1")

    @property
    def model_name(self) -> str:
        """The served model name (``/v1/models``, the ``model`` field of answers)."""
        return self.served_model or f"emulated-{self.model_size}"

    def perf(self) -> PerfModel:
        """The performance model. Raises ValueError for unknown names or a model that does
        not fit in memory."""
        return PerfModel(gpu_profile(self.profile), model_size(self.model_size), self.gpus)

    def scheduler_config(self) -> SchedulerConfig:
        """Scheduler limits; the KV cache size comes from the performance model."""
        capacity = self.perf().kv_capacity_tokens(self.block_size)
        return SchedulerConfig(
            total_blocks=capacity // self.block_size,
            max_model_len=min(self.max_model_len, capacity), block_size=self.block_size,
            max_num_seqs=self.max_num_seqs, max_batched_tokens=self.max_batched_tokens,
            max_waiting=self.max_waiting, prefix_caching=self.prefix_caching)

    def scheduler(self) -> Scheduler:
        """A fresh, empty scheduler for this engine."""
        return Scheduler(self.scheduler_config(), self.perf())
