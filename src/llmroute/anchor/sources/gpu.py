"""An engine source with a GPU source beside it (NVML or DCGM): one merged snapshot, both
polled at once (a slow link to the engine's host would otherwise cost a poll two round
trips)."""

from __future__ import annotations

import asyncio
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
        """Both polls at once, merged (``signals.merge``: engine values first); raises the
        engine poll's SignalSourceError."""
        engine, gpu = await asyncio.gather(self.engine.poll(backend, now),
                                           self.gpu.poll(backend, now), return_exceptions=True)
        if isinstance(engine, BaseException):
            raise engine
        if isinstance(gpu, SignalSourceError):
            return merge(engine, unreadable(DCGM, now, GPU_EXPECTED))
        if isinstance(gpu, BaseException):
            raise gpu
        return merge(engine, gpu)
