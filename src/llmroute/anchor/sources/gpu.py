"""An engine source with a GPU source beside it (NVML or DCGM): one merged snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from llmroute.anchor.protocol import MetricsSource
from llmroute.anchor.sources.dcgm import EXPECTED as GPU_EXPECTED
from llmroute.anchor.sources.dcgm import SOURCE as DCGM
from llmroute.anchor.sources.signals import merge, unreadable
from llmroute.errors import SignalSourceError
from llmroute.types import Backend, EngineSignals


@dataclass(frozen=True)
class WithGpu:
    """``engine``'s signals merged with ``gpu``'s. The engine decides up/down (its error
    propagates); an unreadable GPU leaves only the GPU signals missing."""

    engine: MetricsSource
    gpu: MetricsSource

    async def poll(self, backend: Backend, now: float) -> EngineSignals:
        """Both polls, merged (``signals.merge``: engine values first)."""
        engine = await self.engine.poll(backend, now)
        try:
            gpu = await self.gpu.poll(backend, now)
        except SignalSourceError:
            return merge(engine, unreadable(DCGM, now, GPU_EXPECTED))
        return merge(engine, gpu)
