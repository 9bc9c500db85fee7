"""Self-healing benchmark: today's router (breakers only) against the self-healing one, on
one emulated fleet under the Azure trace, with the same seed.

Six emulated A100/7B engines form one pool behind the real router (``create_app`` served by
uvicorn, the ``seed-000`` preset: 0.4 free VRAM + 0.3 idle GPU + 0.2 network − 0.1 queue,
the GPU signals read from each engine's DCGM page, picked power-of-two-choices: argmax over
signals that move once per poll sends every request of a poll interval to one engine). The
Azure LLM inference trace 2023 (code + conversation, ``bench/lib/schedule_load.py``) is
replayed from its first third on at its own arrival rate (~8 requests/s on average, about a
quarter of the fleet's capacity), time-compressed so the router sees ``--wall-rps`` requests
per wall second. Every link has a 100 ms round trip and 2 MB/s (model units). Three engines
misbehave on cue (``emulator/cues.py``):

- ``gpu-0``'s answers turn flat (entropy ~4 nats per token) and half are cut short, at
  t = 60 s (``--quick``: 6 s) after the load starts;
- ``gpu-1``'s cooling has failed from the start: it runs 40 °C hot — 80 °C idle, up to
  100 °C under full load;
- ``gpu-2``'s link slows 5× (500 ms round trip, 400 kB/s) at t = 30 s (``--quick``: 4 s).

The router polls every engine every 0.5 s (both pages at once; a 5 s poll timeout, so the
slowed link is slow, not dark).

The two arms differ only in what this issue added: ``breakers-only`` runs with quality
ejection off, the thermal filter off and the preset's net term as it was (``latency``);
``self-healing`` runs the defaults (quality ejection, the 78 °C thermal filter, the
``network`` term). Then a healthy replay of the same fleet without cues, self-healing on,
counts false demotions (30 trace minutes in the full run; ``--quick``: 20 wall seconds),
while another process runs the signal collector alone against the fleet to measure its CPU.

Figures (times on the router's wall clock unless said otherwise):

- ``time_to_demote_s``: from ``gpu-0`` going bad to its first demotion (cut, or ejected
  at once when the evidence is overwhelming);
- ``bad_answers_ratio_vs_breakers_only``: requests the router started on ``gpu-0`` after it
  went bad (each a bad answer, or one the fuse had to hand off), self-healing ÷
  breakers-only;
- ``false_demotions``: demotions (to cut, or from healthy straight to ejected) in the
  healthy replay;
- ``hot_gpu_share``: of the requests sent while ``gpu-1`` read above 78 °C (both polls of
  its DCGM page around the send), the share it was given;
- ``slow_link_p95_ttft_ratio_vs_breakers_only``: the fleet's P95 TTFT (model seconds) over
  the requests sent after the link slowed, self-healing ÷ breakers-only;
- the collector's CPU: user + system seconds per wall second of a process polling every
  engine's ``/metrics`` and DCGM page every 0.2 s, and the healing loop's time per tick.

``python bench/healing.py [--quick | --smoke]`` (``--smoke``: 6 s arms, a 3 s healthy
replay — it shows the benchmark runs, not figures); the last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing as mp
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from healing_figures import (
    DEGRADED,
    LEAD_S,
    Arm,
    bad_answers,
    demotions,
    failures,
    hot_share,
    p95_by_backend,
    slow_link,
    time_to_demote,
)
from healing_load import Replay, collector_process, fleet_process, load_process
from modes import mode, parser, pick, skip
from schedule_load import TRACE, LoadPlan, load_trace

from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from llmroute.assemble.runtime import open_runtime
from llmroute.config import Config
from llmroute.emulator.cues import Cues, Link
from llmroute.emulator.spec import EngineSpec
from llmroute.observe.logging import configure_logging

ENGINES = 6
LINK = Link(rtt_s=0.1, bytes_per_s=2e6)
HOT_RISE_C = 40.0
"""gpu-1's failed cooling: 40 °C hotter from the start, it idles at 80 °C — past the 78 °C
limit whatever its load."""
TARGETS = {"time_to_demote_s": 30.0, "bad_answers_ratio_vs_breakers_only": 0.2,
           "false_demotions": 0, "hot_gpu_share": 0.02,
           "slow_link_p95_ttft_ratio_vs_breakers_only": 0.8}


@dataclass(frozen=True)
class Plan:
    """One replay: ``rows`` (wall offset s, prompt tokens, max tokens), the fleet's
    ``time_scale``, when gpu-0 degrades and gpu-2's link slows (wall s after the load
    starts; None: no cues), and the client's TTFT deadline (model s)."""

    rows: list[tuple[float, int, int]]
    time_scale: float
    degrade_s: float | None
    slow_s: float | None
    deadline_s: float = 15.0

    def specs(self) -> list[EngineSpec]:
        """The six engines, with the cues when the plan has them."""
        base = EngineSpec("a100-80g", "7b", time_scale=self.time_scale, stream_interval=16,
                          served_model="fleet-model", cues=Cues(link=LINK))
        specs = [replace(base, seed=i) for i in range(ENGINES)]
        if self.degrade_s is None or self.slow_s is None:
            return specs
        model = self._model_s
        specs[0] = replace(specs[0], cues=replace(base.cues, degrade_at_s=model(self.degrade_s)))
        specs[1] = replace(specs[1], cues=replace(base.cues, hot_at_s=0.0, hot_rise_c=HOT_RISE_C))
        specs[2] = replace(specs[2], cues=replace(base.cues, slow_link_at_s=model(self.slow_s)))
        return specs

    def _model_s(self, wall_after_load: float) -> float:
        return (LEAD_S + wall_after_load) / self.time_scale


def make_plan(rows: list[Any], seconds: float, wall_rps: float, degrade_s: float | None,
              slow_s: float | None) -> Plan:
    """The trace from its first third on (as ``bench/schedule.py`` starts; the first minutes
    arrive sparsely), at its own arrival rate, compressed to ``wall_rps`` on average, for
    ``seconds`` of wall time."""
    rate = len(rows) / (rows[-1].t - rows[0].t)
    time_scale = rate / wall_rps
    t0 = rows[len(rows) // 3].t
    picked = [r for r in rows if 0 <= (r.t - t0) * time_scale < seconds]
    return Plan([((r.t - t0) * time_scale, r.prompt_tokens, r.output_tokens) for r in picked],
                time_scale, degrade_s, slow_s)


def router_config(arm: str, engines: list[tuple[str, int]]) -> Config:
    """One pool over the engines (their DCGM pages as GPU sources), ``seed-000``; the
    breakers-only arm without what the self-healing one adds."""
    backends = [{"id": f"gpu-{i}", "pool": "fleet", "engine": "emulator", "base_url": url,
                 "model": "fleet-model", "context_length": max_len,
                 "gpu": {"dcgm_url": url + "/dcgm/metrics"}}
                for i, (url, max_len) in enumerate(engines)]
    anchor: dict[str, Any] = {"preset": "seed-000", "picker": "p2c", "poll_interval_s": 0.5,
                              "poll_timeout_s": 5.0, "stale_after_s": 10.0}
    extra: dict[str, Any] = {}
    if arm == "breakers-only":
        anchor.update(scorers={"network": 0, "latency": 0.2}, thermal_limit_c=None)
        extra["quality"] = {"enabled": False}
    return Config.model_validate({
        "pools": {"fleet": {}}, "backends": backends, "routing": {"default_pool": "fleet"},
        "timeouts": {"ttft_s": 600, "total_s": 900, "stall_s": 300},
        "gate": {"kind": "rules"}, "anchor": anchor, **extra})


async def run_arm(name: str, plan: Plan, measure_collector: bool = False) -> Arm:
    """Start a fresh fleet and router, replay ``plan``, stop everything."""
    ctx = mp.get_context("spawn")
    load_end, load_child = ctx.Pipe()
    load = ctx.Process(target=load_process, args=(load_child,), daemon=True)
    load.start()  # first: its imports take seconds on a busy machine
    fleet_end, child = ctx.Pipe()
    fleet = ctx.Process(target=fleet_process, args=(plan.specs(), child), daemon=True)
    fleet.start()
    arm = Arm(name, plan)
    try:
        engines, arm.fleet_at = await asyncio.to_thread(fleet_end.recv)
        config = router_config(name, engines)
        async with (open_runtime(config) as rt,
                    serve_in_background(create_app(config, runtime=rt)) as url):
            _watch_ticks(rt.healing, arm)
            await _replay(ctx, url, arm, [e for e, _ in engines], measure_collector,
                          (load, load_end))
    finally:
        fleet_end.send("stop")
        await asyncio.to_thread(fleet.join, 10)
        if load.is_alive():  # the router failed before the replay was handed over
            load.kill()
    return arm


def _watch_ticks(healing: Any, arm: Arm) -> None:
    """Note every transition of ``healing``'s loop and time its ticks (CPU seconds)."""
    tick = healing.tick

    def timed() -> list[Any]:
        before = time.thread_time()
        moves = tick()
        arm.tick_cpu_s += time.thread_time() - before
        arm.ticks += 1
        arm.moves += [(time.monotonic(), m.backend_id, m.new.value) for m in moves
                      if not m.refused]
        return moves

    healing.tick = timed


async def _replay(ctx: Any, url: str, arm: Arm, engines: list[str], collect: bool,
                  loader: tuple[Any, Any]) -> None:
    plan, (load, load_end) = arm.plan, loader
    load_plan = LoadPlan(url, plan.rows, engines, plan.deadline_s * plan.time_scale)
    watch = engines[1] + "/dcgm/metrics" if plan.degrade_s is not None else None
    load_end.send(Replay(load_plan, arm.fleet_at + LEAD_S, watch))
    probe = None
    if collect:
        probe_end, probe_child = ctx.Pipe()
        seconds = plan.rows[-1][0] + LEAD_S
        probe = ctx.Process(target=collector_process, args=(engines, seconds, probe_child),
                            daemon=True)
        probe.start()
    arm.outcomes, arm.temps, arm.start_at = await asyncio.to_thread(load_end.recv)
    await asyncio.to_thread(load.join, 10)
    if probe is not None:
        arm.collector = await asyncio.to_thread(probe_end.recv)
        await asyncio.to_thread(probe.join, 10)


# ------------------------------------------------------------------------------ the run

async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    rows = load_trace()
    size = mode(args)
    seconds, degrade_s, slow_s = pick(size, (240.0, 60.0, 30.0), (25.0, 6.0, 4.0),
                                      (6.0, 2.0, 1.0))
    plan = make_plan(rows, seconds, args.wall_rps, degrade_s, slow_s)
    print(f"# fleet: {ENGINES} × A100/7B, {len(plan.rows)} requests over {seconds:.0f} wall s, "
          f"time_scale {plan.time_scale:.3f} (model s = wall s / time_scale)", flush=True)
    arms = {} if args.only == "healthy" else {
        name: await run_arm(name, plan) for name in ("breakers-only", "self-healing")}
    healthy_s = args.healthy_s or pick(size, 1800.0 * plan.time_scale, 20.0, 3.0)
    healthy = None if args.only == "scenario" else await run_arm(
        "self-healing", make_plan(rows, healthy_s, args.wall_rps, None, None),
        measure_collector=True)
    return {**(scenario(arms) if arms else {}), **(sound(healthy) if healthy else {}),
            "time_scale": _r(plan.time_scale, 4), "quick": size == "quick",
            "wall_rps": args.wall_rps}


def sound(healthy: Arm) -> dict[str, Any]:
    """The healthy replay's figures: false demotions, the collector's CPU."""
    col = healthy.collector or {}
    wall, polls = max(col.get("wall_s", 1.0), 1e-9), max(col.get("polls", 0), 1)
    return {"false_demotions": demotions(healthy),
            "false_demotions_healthy_minutes_model": round(
                healthy.plan.rows[-1][0] / healthy.plan.time_scale / 60.0, 1),
            "healthy_requests": len(healthy.outcomes),
            "healthy_failures": round(failures(healthy), 4),
            "collector_cpu_core_share": _r(col.get("cpu_s", math.nan) / wall, 5),
            "collector_cpu_ms_per_poll": _r(1000 * col.get("cpu_s", math.nan) / polls, 3),
            "collector_polls_per_s": _r(col.get("polls", 0) / wall),
            "healing_tick_ms_healthy": _r(1000 * healthy.tick_cpu_s / max(healthy.ticks, 1),
                                          3)}


def scenario(arms: dict[str, Arm]) -> dict[str, Any]:
    """Print the two arms' table; their figures."""
    base, heal = arms["breakers-only"], arms["self-healing"]
    rows = {}
    for name, arm in arms.items():
        share, p95 = slow_link(arm)
        hot, hot_n = hot_share(arm)
        rows[name] = {"bad_answers_served": bad_answers(arm), "time_to_demote_s":
                      time_to_demote(arm), "hot_gpu_share": hot, "hot_requests": hot_n,
                      "slow_link_share": round(share, 4), "p95_ttft_after_slow_s":
                      round(p95, 3), "failures": round(failures(arm), 4),
                      "other_demotions": demotions(arm, but=DEGRADED),
                      "p95_ttft_by_backend_s": p95_by_backend(arm)}
        print(f"{name:>14}: {orjson.dumps(rows[name]).decode()}", flush=True)
    result = {
        "time_to_demote_s": _r(rows["self-healing"]["time_to_demote_s"]),
        "bad_answers_ratio_vs_breakers_only": _r(bad_answers(heal) / max(bad_answers(base), 1)),
        "hot_gpu_share": _r(rows["self-healing"]["hot_gpu_share"]),
        "hot_gpu_share_breakers_only": _r(rows["breakers-only"]["hot_gpu_share"]),
        "slow_link_p95_ttft_ratio_vs_breakers_only": _r(
            rows["self-healing"]["p95_ttft_after_slow_s"]
            / rows["breakers-only"]["p95_ttft_after_slow_s"]),
        "slow_link_share": {n: r["slow_link_share"] for n, r in rows.items()},
        "healing_tick_ms": _r(1000 * heal.tick_cpu_s / max(heal.ticks, 1), 3),
        "arms": rows}
    return result


def _met(key: str, value: Any) -> bool | None:
    if value is None:
        return None
    return value <= TARGETS[key]


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None or x != x else round(x, digits)


def main() -> None:
    p = parser(__doc__.splitlines()[0])  # --quick: short arms and healthy replay (< 3 min)
    p.add_argument("--wall-rps", type=float, default=6.0,
                   help="requests per wall second the router sees (sets the time scale)")
    p.add_argument("--only", choices=("scenario", "healthy"),
                   help="run only the two arms, or only the healthy replay")
    p.add_argument("--healthy-s", type=float, default=None,
                   help="wall seconds of the healthy replay (default: 30 trace minutes; "
                        "--quick: 20)")
    args = p.parse_args()
    if not TRACE.is_dir():
        skip(f"healing: the Azure trace is not at {TRACE}; nothing measured")
    configure_logging("warning")
    started = time.monotonic()
    result = asyncio.run(main_async(args))
    result["targets_met"] = {k: _met(k, result[k]) for k in TARGETS if k in result}
    result["wall_s"] = round(time.monotonic() - started, 1)
    print("RESULT " + orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
