"""Hosting many emulated engines in one process, each on its own port."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from aiohttp import web

from llmroute.emulator.engine import EmulatedEngine, running
from llmroute.emulator.http import create_engine_app
from llmroute.emulator.spec import EngineSpec


@dataclass(frozen=True, slots=True)
class Served:
    """A running emulated engine: its ``spec``, ``base_url`` (before ``/v1``) and state;
    ``kv_events`` the endpoint its KV-cache events are published on (None: not published)."""

    spec: EngineSpec
    base_url: str
    engine: EmulatedEngine

    @property
    def kv_events(self) -> str | None:
        """The bound ZeroMQ endpoint of the engine's KV-cache events, or None."""
        publisher = self.engine.publisher
        return publisher.endpoint if publisher is not None else None


@contextlib.asynccontextmanager
async def serve_engines(specs: Sequence[EngineSpec], host: str = "127.0.0.1",
                        ports: Sequence[int] | None = None) -> AsyncIterator[list[Served]]:
    """Serve one engine per spec on ``ports`` (default: free ports) while the block runs.

    Raises ValueError for a spec the performance model rejects and OSError when a port
    cannot be bound.
    """
    ports = list(ports) if ports is not None else [0] * len(specs)
    if len(ports) != len(specs):
        raise ValueError("give one port per engine")
    async with contextlib.AsyncExitStack() as stack:
        served = [await stack.enter_async_context(_serve_one(s, host, p))
                  for s, p in zip(specs, ports, strict=True)]
        yield served


@contextlib.asynccontextmanager
async def _serve_one(spec: EngineSpec, host: str, port: int) -> AsyncIterator[Served]:
    engine = EmulatedEngine(spec)
    runner = web.AppRunner(create_engine_app(engine), access_log=None,
                           handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        async with running(engine):
            yield Served(spec, f"http://{host}:{bound}", engine)
    finally:
        await runner.cleanup()


async def serve_until_cancelled(specs: Sequence[EngineSpec], host: str,
                                ports: Sequence[int] | None,
                                announce: bool = True) -> None:
    """Serve ``specs`` until the task is cancelled (Ctrl-C); print each URL if ``announce``."""
    async with serve_engines(specs, host, ports) as served:
        if announce:
            for s in served:
                cfg = s.engine.scheduler.config
                print(f"{s.base_url}  {s.spec.profile} × {s.spec.gpus}  {s.spec.model_name}  "
                      f"KV {cfg.total_blocks * cfg.block_size} tokens  "
                      f"max_model_len {cfg.max_model_len}  time_scale {s.spec.time_scale}",
                      flush=True)
        await asyncio.Event().wait()
