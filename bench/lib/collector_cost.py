"""What the router's signal collector costs in CPU, for ``bench/decide.py``: the share of one
core it takes to poll 8, 100 and 1,000 emulated engines every 200 ms.

* Engines (one process of their own): ``N`` loopback ports, each answering ``GET /metrics``
  with the vLLM text an idle emulated engine (``emulator.engine.EmulatedEngine``, A100/7B)
  renders — rendered once (an idle engine's metrics do not change, and rendering per poll
  would load this process, which is not the one measured).
* Measured process (one, spawned): for each ``N`` in turn, the collector as ``llmroute
  serve`` builds it
  (``assemble.anchor.make_collector`` over ``N`` backends of engine kind ``emulator``, its
  own ``aiohttp.ClientSession``, the default period of 200 ms and timeout of 500 ms). Its CPU
  (``time.process_time``: every thread of the process) is read over windows with the
  collector running and windows with it stopped, alternated; the share of one core is the
  mean CPU seconds per wall second with it running minus the same without.

Also reported per ``N``: polls per second achieved (``N`` × 5 when every poll answers within
its period), the CPU per poll (µs) and how many backends the store held as up at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import statistics
import time
from typing import Any

from aiohttp import web

from llmroute.emulator.engine import EmulatedEngine
from llmroute.emulator.spec import EngineSpec

PERIOD_S = 0.2


def engines_process(n: int, conn: Any) -> None:
    """Child process: serve ``n`` emulated engines' ``/metrics`` on ``n`` ports; send the
    base URLs through ``conn``; serve until anything arrives on it."""
    asyncio.run(_serve(n, conn))


async def _serve(n: int, conn: Any) -> None:
    ports: list[int] = []
    engine = EmulatedEngine(EngineSpec("a100-80g", "7b", served_model="m"))
    body = engine.metrics.render()
    app = web.Application()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain")

    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        for _ in range(n):
            site = web.TCPSite(runner, "127.0.0.1", 0, backlog=64)
            await site.start()
            ports.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        conn.send([f"http://127.0.0.1:{port}" for port in ports])
        await asyncio.to_thread(conn.recv)
    finally:
        await runner.cleanup()


def collector_process(urls: list[str], counts: tuple[int, ...], seconds: float, rounds: int,
                      conn: Any) -> None:
    """Child process: the measurement over the first ``n`` of ``urls`` for each ``n`` in
    ``counts`` (module docstring); sends ``{n: figures}``."""
    from llmroute.observe.logging import configure_logging

    configure_logging("error")  # a thousand engines' first contact is not worth a line each
    conn.send({n: asyncio.run(_measure(urls[:n], seconds, rounds)) for n in counts})


async def _window(seconds: float) -> float:
    """This process's CPU seconds per wall second over ``seconds``."""
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    return (time.process_time() - cpu) / (time.monotonic() - wall)


async def _measure(urls: list[str], seconds: float, rounds: int) -> dict[str, float]:
    import aiohttp

    from llmroute.anchor.store import SignalStore
    from llmroute.assemble.anchor import make_collector
    from llmroute.assemble.runtime import make_backends
    from llmroute.config import Config

    config = Config.model_validate({
        "pools": {"p": {}}, "routing": {"default_pool": "p"}, "gate": {"kind": "off"},
        "anchor": {"poll_interval_s": PERIOD_S},
        "backends": [{"id": f"e{i}", "pool": "p", "engine": "emulator", "base_url": url,
                      "model": "m"} for i, url in enumerate(urls)]})
    backends = make_backends(config, {})
    on, off, polls, up = [], [], 0, 0
    async with aiohttp.ClientSession() as session:
        for _ in range(rounds):
            off.append(await _window(seconds))
            store = SignalStore(1.0)
            collector = make_collector(config, backends, store, session)
            collector.start()
            await asyncio.sleep(2 * PERIOD_S)  # connections open; not counted
            before = collector.polls
            on.append(await _window(seconds))
            polls += collector.polls - before
            up = sum(store.entry(b).state == "up" for b in backends)
            await collector.stop()
    share = statistics.fmean(on) - statistics.fmean(off)
    per_s = polls / (seconds * rounds)
    return {"cpu_share": round(share, 5), "polls_per_s": round(per_s, 1),
            "cpu_us_per_poll": round(share / per_s * 1e6, 1) if per_s else None,
            "up": up, "idle_cpu_share": round(statistics.fmean(off), 5)}


def collector_cost(counts: tuple[int, ...], seconds: float, rounds: int
                   ) -> dict[int, dict[str, float]]:
    """The figures (``_measure``) for each engine count in ``counts``: one engines process
    with ``max(counts)`` ports, one measured process (each count over the first ports)."""
    ctx = mp.get_context("spawn")
    end, child = ctx.Pipe()
    server = ctx.Process(target=engines_process, args=(max(counts), child), daemon=True)
    server.start()
    try:
        urls = end.recv()
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=collector_process,
                           args=(urls, counts, seconds, rounds, theirs), daemon=True)
        proc.start()
        out: dict[int, dict[str, float]] = mine.recv()
        proc.join(10)
    finally:
        with contextlib.suppress(OSError):
            end.send("stop")
        server.join(10)
    return out
