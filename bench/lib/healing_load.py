"""Helpers of ``bench/healing.py`` that run in their own processes: the emulated fleet (it
reports when its engines' model clocks started, so the bench knows when each cue fires on
the wall clock), the load generator (it starts at a planned moment and watches the hot
GPU's temperature on its DCGM page) and a process that runs the signal collector alone, to
measure its CPU.

Times cross processes on ``time.monotonic`` (CLOCK_MONOTONIC: one clock for every process
of the machine).
"""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from schedule_load import LoadPlan, Outcome
from schedule_load import replay as replay_rows

from llmroute.anchor.sources.dcgm import parse_dcgm


def fleet_process(specs: list[Any], conn: Any) -> None:
    """Child process: serve ``specs``, send ``([(base_url, max_model_len)], started)``
    (``started``: the monotonic second every engine's model clock reads 0), serve until
    anything arrives on ``conn``."""
    asyncio.run(_fleet(specs, conn))


async def _fleet(specs: list[Any], conn: Any) -> None:
    from llmroute.emulator.fleet import serve_engines

    async with serve_engines(specs) as served:
        e = served[0].engine
        started = time.monotonic() - e.model_time() * e.spec.time_scale
        conn.send(([(s.base_url, s.engine.scheduler.config.max_model_len) for s in served],
                   started))
        await asyncio.to_thread(conn.recv)


@dataclass(frozen=True, slots=True)
class Replay:
    """What the load generator sends: ``plan`` (``schedule_load.LoadPlan``: router URL,
    rows of (offset s, prompt tokens, max tokens), deadline), from the monotonic second
    ``start_at`` on (or at once, when that has passed); it reads ``watch`` (a DCGM page URL;
    None: none) every ``poll_s``."""

    plan: LoadPlan
    start_at: float
    watch: str | None = None
    poll_s: float = 0.25


def load_process(conn: Any) -> None:
    """Child process, started early (imports take seconds on a busy machine): wait for a
    ``Replay`` on ``conn``, replay it and send ``(outcomes, temperatures, start)`` back;
    ``temperatures``: ``[(offset s, °C)]`` of the watched GPU; ``start``: the monotonic
    second the replay really began (``start_at``, or later when it arrived late)."""
    replay = conn.recv()
    conn.send(asyncio.run(_load(replay)))


async def _load(replay: Replay) -> tuple[list[Outcome], list[tuple[float, float]], float]:
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        temps: list[tuple[float, float]] = []
        start = max(replay.start_at, time.monotonic())
        await asyncio.sleep(max(start - time.monotonic(), 0.0))
        outcomes = await replay_rows(session, replay.plan, start,
                                     _watch(session, replay, temps, start))
    return outcomes, temps, start


async def _watch(session: aiohttp.ClientSession, replay: Replay,
                 temps: list[tuple[float, float]], start: float) -> None:
    if replay.watch is None:
        return
    while True:
        try:
            async with session.get(replay.watch) as resp:
                signals = parse_dcgm(await resp.text(), 0.0)
            if signals.gpu_temp_c is not None:
                temps.append((time.monotonic() - start, signals.gpu_temp_c))
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(replay.poll_s)


def collector_process(engines: list[str], seconds: float, conn: Any) -> None:
    """Child process: poll every engine's ``/metrics`` and DCGM page as the router's signal
    collector does (period 0.2 s), nothing else, for ``seconds``; send ``{"polls",
    "cpu_s", "wall_s"}`` (this process's user + system CPU over the run)."""
    conn.send(asyncio.run(_collect(engines, seconds)))


async def _collect(engines: list[str], seconds: float) -> dict[str, float]:
    from llmroute.assemble.anchor import make_collector
    from llmroute.assemble.runtime import make_backends
    from llmroute.anchor.store import SignalStore
    from llmroute.config import Config

    config = Config.model_validate({
        "pools": {"fleet": {}}, "routing": {"default_pool": "fleet"},
        "backends": [{"id": f"gpu-{i}", "pool": "fleet", "engine": "emulator",
                      "base_url": url, "model": "fleet-model", "context_length": 4096,
                      "gpu": {"dcgm_url": url + "/dcgm/metrics"}}
                     for i, url in enumerate(engines)],
        "anchor": {"poll_timeout_s": 2.0}})
    async with aiohttp.ClientSession() as session:
        collector = make_collector(config, make_backends(config, {}), SignalStore(5.0),
                                   session)
        before, wall = _cpu(), time.monotonic()
        collector.start()
        await asyncio.sleep(seconds)
        await collector.stop()
        return {"polls": collector.polls, "cpu_s": _cpu() - before,
                "wall_s": time.monotonic() - wall}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
