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

Reported per policy: P50/P95 TTFT, P95 end-to-end latency, failure rate, and the spread of
KV-cache usage across engines: at every ``/metrics`` poll the population standard deviation
of the engines' KV-cache fractions, averaged over the run ("± points around the fleet mean").

``python bench/schedule.py [--quick]``; a plot goes to ``bench/results/schedule.png``; the
last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import math
import multiprocessing as mp
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from schedule_load import (
    TRACE,
    LoadPlan,
    Outcome,
    Poll,
    TraceRow,
    fleet_process,
    load_process,
    load_trace,
)

from llmroute.api.app import create_app
from llmroute.config import Config
from llmroute.emulator.capacity import saturation_throughput
from llmroute.emulator.spec import EngineSpec
from llmroute.observe.logging import configure_logging
from llmroute.assemble.runtime import open_runtime
from llmroute.api.server import serve_in_background

RESULTS = Path(__file__).resolve().parent / "results"
POLICIES = ("round-robin", "least-in-flight", "default")
FLEET = (  # (GPU profile, model size, GPUs): saturation capacities differ ~10×
    ("h100", "13b", 1), ("a100-80g", "7b", 1), ("a100-80g", "7b", 1), ("a100-80g", "13b", 1),
    ("a100-80g", "13b", 1), ("t4", "1b", 1), ("l4", "8b", 1), ("l4", "8b", 1),
)
LOAD = 0.85


@dataclass(frozen=True)
class Plan:
    """What one run replays: ``schedule`` rows ``(wall offset s, prompt, max tokens)``."""

    specs: list[EngineSpec]
    schedule: list[tuple[float, int, int]]
    time_scale: float
    capacity_rps: float
    offered_rps: float
    deadline_s: float


@dataclass(frozen=True)
class Run:
    """One policy's measurements, in model seconds. TTFT percentiles count a request the
    client gave up on (``deadline``) as the deadline — a lower bound, which can only
    flatten a policy's tail; requests still streaming when the run ended (``unfinished``)
    count for TTFT, not for end-to-end latency or failures."""

    policy: str
    outcomes: list[Outcome]
    polls: list[Poll]
    time_scale: float
    deadline_s: float

    def count(self, status: str) -> int:
        """Requests that ended with ``status``."""
        return sum(1 for o in self.outcomes if o.status == status)

    def ttft(self) -> list[float]:
        """Sorted TTFTs (model s), gave-up requests counted at the deadline."""
        seen = [o.ttft_s / self.time_scale for o in self.outcomes if o.ttft_s is not None
                and o.status in ("ok", "unfinished")]
        return sorted(seen + [self.deadline_s] * self.count("deadline"))

    def e2e(self) -> list[float]:
        """Sorted end-to-end latencies (model s) of the successful requests."""
        return sorted(o.e2e_s / self.time_scale for o in self.outcomes if o.status == "ok")

    def failure_rate(self) -> float:
        """Failed or gave-up requests over the settled ones (fraction 0–1)."""
        settled = len(self.outcomes) - self.count("unfinished")
        return (self.count("failed") + self.count("deadline")) / max(settled, 1)

    def kv_spread(self) -> float:
        """Time-averaged population standard deviation of KV usage across engines (0–1)."""
        return statistics.fmean(statistics.pstdev(p.kv) for p in self.polls)

    def kv_means(self) -> list[float]:
        """Each engine's time-averaged KV-cache usage (0–1)."""
        return [statistics.fmean(p.kv[i] for p in self.polls)
                for i in range(len(self.polls[0].kv))]

    def load(self, i: int) -> tuple[float, int]:
        """Engine ``i``'s time-averaged running requests and its most waiting at one poll."""
        return (statistics.fmean(p.running[i] for p in self.polls),
                max(p.waiting[i] for p in self.polls))


def pct(values: list[float], q: float) -> float:
    """The ``q``-quantile (0–1) by the nearest-rank method; NaN when empty."""
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def make_plan(rows: list[TraceRow], n: int, wall_rps: float, seed: int,
              deadline_s: float) -> Plan:
    """The fleet, the window of ``n`` requests and the time compression for 85 % of the
    fleet's capacity on that window's own request mix."""
    start = len(rows) // 3
    window = rows[start:start + n]
    sample = random.Random(seed).sample(window, min(600, len(window)))
    mix = [(r.prompt_tokens, r.output_tokens) for r in sample]
    per_kind = {k: saturation_throughput(EngineSpec(*k), mix) for k in set(FLEET)}
    capacity = sum(per_kind[k] for k in FLEET)
    offered = LOAD * capacity
    span = window[-1].t - window[0].t
    compress = (len(window) / span) / offered  # trace seconds per model second, inverted
    time_scale = offered / wall_rps
    specs = [EngineSpec(p, m, g, time_scale=time_scale, stream_interval=16,
                        served_model="fleet-model", seed=i)
             for i, (p, m, g) in enumerate(FLEET)]
    schedule = [((r.t - window[0].t) * compress * time_scale, r.prompt_tokens,
                 r.output_tokens) for r in window]
    return Plan(specs, schedule, time_scale, capacity, offered, deadline_s)


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


async def run_policy(policy: str, plan: Plan, scorers: dict[str, float] | None = None,
                     anchor: dict[str, Any] | None = None) -> Run:
    """Start a fresh fleet and router, replay the plan, stop everything; ``scorers``
    overrides the preset's weights."""
    return await run_fleet(policy, plan,
                           lambda engines: router_config(policy, engines, scorers, anchor))


async def run_fleet(name: str, plan: Plan, config_for: Callable[[list[Any]], Config],
                    prompts: Any = None) -> Run:
    """Start a fresh fleet of ``plan.specs`` and a router configured by ``config_for``
    (given ``[(base_url, max_model_len, kv_events)]`` per engine), replay the plan (texts
    from ``prompts``, see ``LoadPlan``), stop everything; the Run is called ``name``."""
    ctx = mp.get_context("spawn")
    fleet_end, child = ctx.Pipe()
    fleet = ctx.Process(target=fleet_process, args=(plan.specs, child), daemon=True)
    fleet.start()
    try:
        engines = await asyncio.to_thread(fleet_end.recv)
        config = config_for(engines)
        async with (open_runtime(config) as rt,
                    serve_in_background(create_app(config, runtime=rt)) as url):
            outcomes, polls = await _replay(ctx, url, plan, [e[0] for e in engines], prompts)
    finally:
        fleet_end.send("stop")
        await asyncio.to_thread(fleet.join, 10)
    return Run(name, outcomes, polls, plan.time_scale, plan.deadline_s)


async def _replay(ctx: Any, url: str, plan: Plan, engines: list[str],
                  prompts: Any = None) -> tuple[Any, Any]:
    load_end, child = ctx.Pipe()
    load_plan = LoadPlan(url, plan.schedule, engines, plan.deadline_s * plan.time_scale,
                         prompts=prompts)
    load = ctx.Process(target=load_process, args=(load_plan, child), daemon=True)
    load.start()
    result = await asyncio.to_thread(load_end.recv)
    await asyncio.to_thread(load.join, 10)
    return result


def table(runs: list[Run]) -> str:
    """The human-readable comparison."""
    head = (f"{'policy':<16}{'n':>6}{'TTFT p50 s':>12}{'TTFT p95 s':>12}{'E2E p95 s':>12}"
            f"{'failed':>9}{'gave up':>9}{'running':>9}{'KV mean':>9}{'KV ±':>8}")
    lines = [head, "-" * len(head)]
    for r in runs:
        kv = r.kv_means()
        lines.append(f"{r.policy:<16}{len(r.outcomes):>6}{pct(r.ttft(), .5):>12.3f}"
                     f"{pct(r.ttft(), .95):>12.3f}{pct(r.e2e(), .95):>12.3f}"
                     f"{r.failure_rate():>9.2%}{r.count('deadline'):>9}"
                     f"{r.count('unfinished'):>9}{statistics.fmean(kv):>9.1%}"
                     f"{r.kv_spread():>8.1%}")
    return "\n".join(lines)


def per_engine(runs: list[Run], plan: Plan) -> str:
    """Per engine and policy: requests served, their P95 TTFT (model s) and the engine's
    time-averaged KV-cache usage; then P95 TTFT by prompt size."""
    lines = [f"{'engine':<20}" + "".join(f"{r.policy:>43}" for r in runs)]
    for i, s in enumerate(plan.specs):
        cells = []
        for r in runs:
            mine = [o for o in r.outcomes if o.backend == f"gpu-{i}"]
            p95 = pct(sorted(o.ttft_s / r.time_scale for o in mine if o.ttft_s), .95)
            run, wait = r.load(i)
            cells.append(f"{len(mine):>4} req {p95:>6.2f} s {r.kv_means()[i]:>5.1%} KV"
                         f" {run:>5.1f} run {wait:>3} wait")
        lines.append(f"{f'gpu-{i} {s.profile}/{s.model_size}':<20}" + "".join(
            f"{c:>43}" for c in cells))
    for lo, hi in ((0, 2000), (2000, 4000), (4000, 10**9)):
        cells = []
        for r in runs:
            ttft = [o.ttft_s / r.time_scale for o in r.outcomes if o.ttft_s
                    and lo <= plan.schedule[o.index][1] < hi]
            cells.append(f"{len(ttft):>4} req {pct(sorted(ttft), .95):>6.2f} s p95")
        label = f"prompt {lo // 1000}k-{hi // 1000}k" if hi < 10**9 else f"prompt ≥{lo // 1000}k"
        lines.append(f"{label:<20}" + "".join(f"{c:>43}" for c in cells))
    return "\n".join(lines)


def plot(runs: list[Run], plan: Plan, path: Path) -> None:
    """TTFT CDFs and per-engine KV usage, one colour per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in runs:
        ttft = r.ttft()
        ax1.plot(ttft, [(i + 1) / len(ttft) for i in range(len(ttft))], label=r.policy)
    ax1.set(xscale="log", xlabel="TTFT (model s)", ylabel="fraction of requests",
            title="TTFT CDF")
    ax1.legend()
    width = 0.8 / len(runs)
    for k, r in enumerate(runs):
        xs = [i + k * width for i in range(len(plan.specs))]
        ax2.bar(xs, [100 * v for v in r.kv_means()], width, label=r.policy)
    ax2.set_xticks([i + 0.4 - width / 2 for i in range(len(plan.specs))],
                   [f"{s.profile}\n{s.model_size}" for s in plan.specs], fontsize=8)
    ax2.set(ylabel="KV-cache usage, time-averaged (%)", title="KV cache per engine")
    ax2.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def result(runs: list[Run]) -> dict[str, Any]:
    """The RESULT figures: the anchor's ratios against the baselines of the same run
    (None for a policy that was not run)."""
    by = {r.policy: r for r in runs}
    p95 = {name: pct(r.ttft(), 0.95) for name, r in by.items()}
    anchor = by.get("default")

    def ratio(baseline: str) -> float | None:
        if anchor is None or baseline not in by:
            return None
        return round(p95["default"] / p95[baseline], 4)

    return {"p95_ttft_ratio_vs_round_robin": ratio("round-robin"),
            "p95_ttft_ratio_vs_least_inflight": ratio("least-in-flight"),
            "failure_rate": None if anchor is None else round(anchor.failure_rate(), 5),
            "kv_spread": None if anchor is None else round(anchor.kv_spread(), 4),
            "p95_ttft_s": {k: round(v, 4) for k, v in p95.items()},
            "failure_rate_by_policy": {k: round(r.failure_rate(), 5) for k, r in by.items()},
            "kv_spread_by_policy": {k: round(r.kv_spread(), 4) for k, r in by.items()}}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Plan, run every policy, print the tables, save the plot; returns the RESULT."""
    rows = load_trace(args.trace)
    n = args.requests or (250 if args.quick else 2000)
    plan = make_plan(rows, n, args.wall_rps, args.seed, args.deadline)
    print(f"fleet capacity {plan.capacity_rps:.1f} req/s (model time); offered "
          f"{plan.offered_rps:.1f} req/s = {LOAD:.0%}; {n} requests; time scale "
          f"{plan.time_scale:.2f} wall s per model s", flush=True)
    runs = []
    for policy in args.policies:
        t0 = time.monotonic()
        tuned = policy == "default"
        runs.append(await run_policy(policy, plan, args.scorers if tuned else None,
                                     args.anchor if tuned else None))
        print(f"  {policy}: {time.monotonic() - t0:.0f} s wall", flush=True)
    print(table(runs))
    print(per_engine(runs, plan))
    plot(runs, plan, RESULTS / "schedule.png")
    report_failures(runs, RESULTS / "schedule.png")
    return result(runs)


def main() -> int:
    """Command line entry; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    replay_args(p, "250 / 2000", 15.0, 15.0, TRACE)
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
    """The options every trace replay takes: --quick, --requests (``requests``: the
    defaults, for the help), --wall-rps, --deadline, --trace and --seed."""
    p.add_argument("--quick", action="store_true", help="fewer requests (< 3 min on 2 cores)")
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
    """Run ``main_async(args)`` and print its RESULT line; skip (exit 0) when the trace is
    not ``present``."""
    if not present:
        print(f"{name}: the trace is not at {args.trace}; skipped")
        return 0
    configure_logging("error")
    res = asyncio.run(main_async(args))
    print("RESULT " + orjson.dumps(res).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
