"""The processes of bench/faults.py: the scripted engines, and the router over them. Each
runs its own event loop (``multiprocessing`` spawn), as engines and a router would on one
machine; the bench's clients run in the parent."""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from typing import Any

import aiohttp
from aiohttp import web
from faulty import Faulty

from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from llmroute.assemble.runtime import make_backends, wire
from llmroute.config import Config

TTFT_S, STALL_S = 1.0, 0.5
SLOW_FLOOR_TPS, SLOW_WINDOW_S = 5.0, 0.5


def config(urls: list[str]) -> Config:
    """The router's configuration over engines at ``urls``: one pool, the bench's TTFT and
    stall bounds, the slow-stream floor, three attempts per request."""
    return Config.model_validate({
        "pools": {"general": {}}, "routing": {"default_pool": "general"},
        "gate": {"kind": "off"},
        "fuse": {"slow": {"min_tokens_per_s": SLOW_FLOOR_TPS, "window_s": SLOW_WINDOW_S}},
        "timeouts": {"ttft_s": TTFT_S, "stall_s": STALL_S, "total_s": 30},
        "retry": {"max_attempts": 3},
        "backends": [{"id": f"e{i}", "pool": "general", "engine": "vllm", "base_url": u}
                     for i, u in enumerate(urls)]})


def engines_main(conn: Any, seed: int, weights: tuple[float, ...]) -> None:
    """The engines' process: serve three ``Faulty`` engines, send their URLs, and their
    fault logs once told to stop."""
    async def main() -> None:
        rng = random.Random(seed)
        engines = [Faulty(random.Random(rng.random()), weights, hold_s=STALL_S * 6)
                   for _ in range(3)]
        lag: list[float] = []
        async with contextlib.AsyncExitStack() as stack:
            conn.send([await stack.enter_async_context(_serve_engine(e)) for e in engines])
            ticker = asyncio.create_task(ticker_lag(lag))
            await asyncio.to_thread(conn.recv)
            ticker.cancel()
            conn.send(([tuple(x) for e in engines for x in e.log], p99_ms(lag)))
    asyncio.run(main())


def router_main(conn: Any, urls: list[str]) -> None:
    """The router's process: serve llmroute over ``urls`` (its HTTP client without a
    connection cap, as ``open_runtime`` makes it: a default aiohttp session would queue every
    upstream request past 100 behind the others; no signal collector: the scripted engines
    have no ``/metrics``), send its URL, stop when told."""
    async def main() -> None:
        cfg = config(urls)
        connector = aiohttp.TCPConnector(limit=0)  # as open_runtime's: no connection cap
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            app = create_app(cfg, runtime=wire(cfg, make_backends(cfg, {}), session))
            lag: list[float] = []
            async with serve_in_background(app) as url:
                ticker = asyncio.create_task(ticker_lag(lag))
                conn.send(url)
                await asyncio.to_thread(conn.recv)
                ticker.cancel()
                conn.send(p99_ms(lag))
    asyncio.run(main())


async def ticker_lag(lag: list[float], period_s: float = 0.01) -> None:
    """Note in ``lag`` how late each ``period_s`` sleep of this event loop wakes (seconds):
    how long the loop's other work kept it from its timers."""
    while True:
        t = time.monotonic()
        await asyncio.sleep(period_s)
        lag.append(time.monotonic() - t - period_s)


def p99_ms(lag: list[float]) -> float:
    """The 99th percentile of ``lag`` in milliseconds (0 with fewer than two samples)."""
    return round(statistics.quantiles(lag, n=100)[-1] * 1000, 1) if len(lag) > 1 else 0.0


@contextlib.asynccontextmanager
async def _serve_engine(engine: Faulty) -> Any:
    runner = web.AppRunner(engine.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
