"""Scheduling benchmark: 8 heterogeneous emulated GPU engines behind the real router.

Replays the Azure LLM inference trace 2023 (code + conversation services, real arrival times
and token counts) against the router over HTTP, time-compressed so the offered load is 85 %
of the fleet's capacity, once per routing policy selected through the config
(``anchor: {preset: …}``): ``round-robin``, ``least-in-flight`` (what LiteLLM's
``least-busy`` does) and the anchor's ``default``. The fleet's capacity is the sum of each
engine's saturation throughput on the same request mix (``emulator.capacity``).

Processes: the emulated fleet, the router (this process) and the load generator each run
alone, so the client does not starve the router. Times are reported in model seconds (the
emulated hardware's), i.e. wall seconds / ``time_scale``.

Reported per policy: P50/P95/P99 TTFT, P50/P95/P99 end-to-end latency, failure rate, the
spread of KV-cache usage across engines (at every ``/metrics`` poll the population standard
deviation of the engines' KV-cache fractions, averaged over the run: "± points around the
fleet mean") and the fleet's mean GPU-busy fraction while requests were sent (each
engine's ``llmroute_emulator_gpu_busy_seconds_total`` read as the first and as the last
request is sent, averaged over the eight: what NVML's utilisation reports for a real GPU).

Goodput sweep: for each policy, the highest offered load (a fraction of the fleet's
capacity, on the grid ``GOODPUT_GRID``) whose P95 TTFT stays within ``TARGET_P95_TTFT_S``,
found by bisection over the grid (a fresh fleet per probe; the probe's client gives up
after ``PROBE_DEADLINE`` × the target, counted as over it). A probe is judged on the
engines' own TTFT histograms (model seconds, from arrival at the engine to the first token:
at least 95 % of the requests sent within the target), so the shared machine's lag in
delivering tokens to the client does not decide it; the client's P95 is printed beside. ``goodput_ratio_vs_rr`` is the
default policy's sustained load over round-robin's. Probes replay the same trace window at
``--wall-rps`` requests per wall second, fewer where the emulated clock would otherwise run
faster than the wall clock (``MIN_TIME_SCALE``).

``python bench/schedule.py [--quick | --smoke]``; a plot goes to
``bench/results/schedule.png``; the last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import multiprocessing as mp
import random
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from modes import add_sizes, mode, parser, pick, results_dir, skip  # noqa: E402
from schedule_load import (TRACE, LoadPlan, TraceRow, fleet_process,  # noqa: E402
                           load_process, load_trace)
from schedule_report import (Probe, Run, Sweep, pct, per_engine, plot, result,  # noqa: E402
                             sweep_table, table)

__all__ = ["Plan", "Run", "Workers", "pct", "replay_args", "report_failures", "run_main"]
"""What ``bench/prefix.py`` builds on (``Run`` and ``pct`` live in ``schedule_report``)."""

from llmroute.api.app import create_app  # noqa: E402
from llmroute.api.server import serve_in_background  # noqa: E402
from llmroute.assemble.runtime import open_runtime  # noqa: E402
from llmroute.config import Config  # noqa: E402
from llmroute.emulator.capacity import saturation_throughput  # noqa: E402
from llmroute.emulator.spec import EngineSpec  # noqa: E402
from llmroute.observe.logging import configure_logging  # noqa: E402

POLICIES = ("round-robin", "least-in-flight", "default")
FLEET = (  # (GPU profile, model size, GPUs): saturation capacities differ ~10×
    ("h100", "13b", 1), ("a100-80g", "7b", 1), ("a100-80g", "7b", 1), ("a100-80g", "13b", 1),
    ("a100-80g", "13b", 1), ("t4", "1b", 1), ("l4", "8b", 1), ("l4", "8b", 1),
)
LOAD = 0.85
TARGET_P95_TTFT_S = 2.5
"""The goodput sweep's SLO: P95 time to first token within 2.5 model seconds — a bound of
vLLM's TTFT histogram buckets (``emulator/metrics.py``), so the share of requests within it
is read exactly from the engines' ``/metrics``."""
GOODPUT_GRID = (0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
                1.0, 1.1)
"""Offered loads the sweep may probe, as fractions of the fleet's capacity (finer at the low
end, where round-robin's slowest engines saturate)."""
SMOKE_GRID = (0.6,)
PROBE_DEADLINE = 3.0
"""A probe's client gives up after this many times the target without a first token."""
MIN_TIME_SCALE = 1.0
"""Wall seconds per model second at least: below it the fleet process, stepping eight
engines on a shared 2-core machine, fell behind the clock it emulates (at 0.3, probes at 5 %
of capacity read a P95 TTFT of 6 s that the model did not produce)."""


@dataclass(frozen=True)
class Plan:
    """What one run replays: ``schedule`` rows ``(wall offset s, prompt, max tokens)``;
    ``load``: the offered load as a fraction of ``capacity_rps``."""

    specs: list[EngineSpec]
    schedule: list[tuple[float, int, int]]
    time_scale: float
    capacity_rps: float
    offered_rps: float
    deadline_s: float
    load: float = LOAD


def make_plan(rows: list[TraceRow], n: int, wall_rps: float, seed: int,
              deadline_s: float, load: float = LOAD) -> Plan:
    """The fleet, the window of ``n`` requests and the time compression for ``load`` (a
    fraction) of the fleet's capacity on that window's own request mix."""
    start = len(rows) // 3
    window = rows[start:start + n]
    sample = random.Random(seed).sample(window, min(600, len(window)))
    mix = [(r.prompt_tokens, r.output_tokens) for r in sample]
    per_kind = {k: saturation_throughput(EngineSpec(*k), mix) for k in set(FLEET)}
    capacity = sum(per_kind[k] for k in FLEET)
    offered = load * capacity
    span = window[-1].t - window[0].t
    compress = (len(window) / span) / offered  # trace seconds per model second, inverted
    time_scale = max(offered / wall_rps, MIN_TIME_SCALE)
    specs = [EngineSpec(p, m, g, time_scale=time_scale, stream_interval=16,
                        served_model="fleet-model", seed=i)
             for i, (p, m, g) in enumerate(FLEET)]
    schedule = [((r.t - window[0].t) * compress * time_scale, r.prompt_tokens,
                 r.output_tokens) for r in window]
    return Plan(specs, schedule, time_scale, capacity, offered, deadline_s, load)


def router_config(policy: str, engines: list[tuple[str, int, str | None]],
                  scorers: dict[str, float] | None = None,
                  anchor: dict[str, Any] | None = None) -> Config:
    """One pool ``fleet`` over the engines, routed by the anchor preset ``policy`` (its
    weights overridden by ``scorers``, other ``anchor`` settings merged in). The gate is the
    rules gate: with one pool its verdict does not change the route, and the benchmark
    measures the anchor."""
    if "anchor" not in Config.model_fields:
        raise SystemExit("schedule: this llmroute has no `anchor:` config section yet, so "
                         "routing policies cannot be selected; nothing was measured")
    backends = [{"id": f"gpu-{i}", "pool": "fleet", "engine": "emulator", "base_url": url,
                 "model": "fleet-model", "context_length": max_len}
                for i, (url, max_len, *_) in enumerate(engines)]
    return Config.model_validate({
        "pools": {"fleet": {}}, "backends": backends, "routing": {"default_pool": "fleet"},
        "timeouts": {"ttft_s": 600, "total_s": 900, "stall_s": 300},
        "gate": {"kind": "rules"}, "anchor": {"preset": policy, "scorers": scorers or {},
                                              **(anchor or {})}})


class Workers:
    """The fleet and load-generator processes, started once for every run (``start``)."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self._fleet, fleet_child = ctx.Pipe()
        self._load, load_child = ctx.Pipe()
        self._procs = [ctx.Process(target=fleet_process, args=(fleet_child,), daemon=True),
                       ctx.Process(target=load_process, args=(load_child,), daemon=True)]

    @contextlib.asynccontextmanager
    async def start(self) -> AsyncIterator[Workers]:
        """Run both processes while the block runs."""
        for proc in self._procs:
            proc.start()
        try:
            yield self
        finally:
            self._fleet.send(None)
            self._load.send(None)
            for proc in self._procs:
                await asyncio.to_thread(proc.join, 10)

    async def run_policy(self, policy: str, plan: Plan, scorers: dict[str, float] | None = None,
                         anchor: dict[str, Any] | None = None) -> Run:
        """A fresh fleet and router, the plan replayed, everything stopped; ``scorers``
        overrides the preset's weights."""
        return await self.run(policy, plan,
                              lambda engines: router_config(policy, engines, scorers, anchor))

    async def run(self, name: str, plan: Plan, config_for: Callable[[list[Any]], Config],
                  prompts: Any = None) -> Run:
        """A fresh fleet of ``plan.specs`` and a router configured by ``config_for`` (given
        ``[(base_url, max_model_len, kv_events)]`` per engine), the plan replayed (texts from
        ``prompts``, see ``LoadPlan``), everything stopped; the Run is called ``name``."""
        self._fleet.send(plan.specs)
        try:
            engines = await asyncio.to_thread(self._fleet.recv)
            config = config_for(engines)
            async with (open_runtime(config) as rt,
                        serve_in_background(create_app(config, runtime=rt)) as url):
                self._load.send(LoadPlan(url, plan.schedule, [e[0] for e in engines],
                                         plan.deadline_s * plan.time_scale, prompts=prompts))
                outcomes, polls, busy, first = await asyncio.to_thread(self._load.recv)
        finally:
            self._fleet.send("stop")
        return Run(name, outcomes, polls, plan.time_scale, plan.deadline_s, busy, first)


async def goodput(workers: Workers, policy: str, probe: Plan, grid: tuple[float, ...],
                  rows: list[TraceRow], args: argparse.Namespace, tuning: dict[str, Any]
                  ) -> Sweep:
    """The highest load on ``grid`` at which ``policy`` keeps P95 TTFT within the target at
    the engines, by bisection (P95 assumed to grow with the load): ``probe``'s window at each
    load tried."""
    sweep = Sweep(policy, TARGET_P95_TTFT_S)
    lo, hi = -1, len(grid)  # grid[lo] met the target, grid[hi] did not (or the grid's ends)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        plan = make_plan(rows, len(probe.schedule), args.wall_rps,
                         args.seed, probe.deadline_s, grid[mid])
        run = await workers.run_policy(policy, plan, **tuning)
        found = Probe(run.engine_within(TARGET_P95_TTFT_S), pct(run.ttft(), 0.95))
        sweep.probes[grid[mid]] = found
        lo, hi = (mid, hi) if found.met else (lo, mid)
        print(f"  {policy} at {grid[mid]:.1%}: {found.within:.1%} of first tokens within "
              f"{TARGET_P95_TTFT_S:g} s at the engines; client P95 TTFT "
              f"{found.client_p95_s:.2f} s", flush=True)
    return sweep


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Plan, run every policy, sweep each one's goodput, print the tables, save the plot;
    returns the RESULT."""
    size = mode(args)
    rows = load_trace(args.trace)
    n = args.requests or pick(size, 2000, 250, 24)
    plan = make_plan(rows, n, args.wall_rps, args.seed, args.deadline)
    probe = make_plan(rows, pick(size, 400, 60, 16), args.wall_rps, args.seed,
                      PROBE_DEADLINE * TARGET_P95_TTFT_S)
    grid = pick(size, GOODPUT_GRID, GOODPUT_GRID, SMOKE_GRID)
    print(f"fleet capacity {plan.capacity_rps:.1f} req/s (model time); offered "
          f"{plan.offered_rps:.1f} req/s = {LOAD:.0%}; {n} requests; time scale "
          f"{plan.time_scale:.2f} wall s per model s", flush=True)
    runs, sweeps = [], []
    async with Workers().start() as workers:
        for policy in args.policies:
            t0 = time.monotonic()
            tuning = {"scorers": args.scorers, "anchor": args.anchor} \
                if policy == "default" else {}
            runs.append(await workers.run_policy(policy, plan, **tuning))
            sweeps.append(await goodput(workers, policy, probe, grid, rows, args, tuning))
            print(f"  {policy}: {time.monotonic() - t0:.0f} s wall", flush=True)
    print(table(runs, TARGET_P95_TTFT_S))
    print(per_engine(runs, plan.specs, plan.schedule))
    print(sweep_table(sweeps, probe.capacity_rps))
    path = results_dir() / "schedule.png"
    plot(runs, plan.specs, path)
    report_failures(runs, path)
    return result(runs, sweeps, probe.capacity_rps)


def main() -> int:
    """Command line entry; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    replay_args(p, "2000; --quick 250", 15.0, 15.0, TRACE)
    p.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    p.add_argument("--scorers", type=orjson.loads, default=None,
                   help='weights over the default preset, JSON, e.g. \'{"in-flight": 0.5}\' '
                   '(0 removes a scorer); for tuning')
    p.add_argument("--anchor", type=orjson.loads, default=None,
                   help='other anchor settings for the default policy, JSON, e.g. '
                   '\'{"ttft_headroom_factor": 3}\'; for tuning')
    args = p.parse_args()
    return run_main("schedule", args, args.trace.is_dir(), main_async)


def replay_args(p: argparse.ArgumentParser, requests: str, wall_rps: float,
                deadline_s: float, trace: Path) -> None:
    """The options every trace replay takes: the run sizes (``modes.add_sizes``),
    --requests (``requests``: the defaults, for the help), --wall-rps, --deadline, --trace
    and --seed."""
    add_sizes(p)
    p.add_argument("--requests", type=int, help=f"requests per policy (default {requests})")
    p.add_argument("--wall-rps", type=float, default=wall_rps,
                   help="requests per wall second")
    p.add_argument("--deadline", type=float, default=deadline_s,
                   help="TTFT after which the client gives up (model seconds)")
    p.add_argument("--trace", type=Path, default=trace)
    p.add_argument("--seed", type=int, default=0)


def report_failures(runs: list[Run], plot_path: Path) -> None:
    """Print each run's failures by cause and where the plot went."""
    for r in runs:
        why = collections.Counter(o.error or o.status for o in r.outcomes
                                  if o.status in ("failed", "deadline"))
        print(f"{r.policy} failures: {dict(why.most_common(4)) or 'none'}")
    print(f"plot: {plot_path}")


def run_main(name: str, args: argparse.Namespace, present: bool,
             main_async: Callable[[argparse.Namespace], Any]) -> int:
    """Run ``main_async(args)`` and print its RESULT line; ``SKIP`` (exit 0) when the trace
    is not ``present``."""
    if not present:
        skip(f"{name}: the trace is not at {args.trace}")
    configure_logging("error")
    res = asyncio.run(main_async(args))
    print("RESULT " + orjson.dumps(res).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
