"""Open the local engine fleet: build (once) the llama-server binary, find the bundled GGUF,
start every engine and stop them all on exit."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from llmroute.local.build import build_paths, ensure_llama_server
from llmroute.local.engines import EngineFleet, EngineSpec
from llmroute.local.model import bundled_gguf

Progress = Callable[[float, str], None]


def _stage(progress: Progress | None, start: float, span: float) -> Progress | None:
    """Map a stage's 0–1 progress onto ``[start, start + span]`` of the whole start-up."""
    if progress is None:
        return None
    return lambda fraction, message: progress(start + span * fraction, message)


@contextlib.asynccontextmanager
async def open_fleet(specs: Sequence[EngineSpec], progress: Progress | None = None
                     ) -> AsyncIterator[EngineFleet]:
    """Running engines for ``specs``; ``progress(fraction 0–1, message)`` covers the build
    (first 80 %) and the health checks. Raises EngineError."""
    binary = await ensure_llama_server(_stage(progress, 0.0, 0.8))
    logs = build_paths().cache / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    fleet = EngineFleet(specs, binary, bundled_gguf(), logs, progress=_stage(progress, 0.8, 0.2))
    async with fleet:
        yield fleet
