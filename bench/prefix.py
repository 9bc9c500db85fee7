"""Prefix-cache-aware routing benchmark: the Mooncake conversation trace over 8 emulated
engines with prefix caches, behind the real router, one routing policy at a time.

The trace (``bench/lib/mooncake.py``): real Kimi conversation requests whose 512-token
prompt blocks carry hash ids; each id becomes a fixed text block, so requests share exactly
the prefixes the trace says they share. Whole conversations are sampled; requests longer
than the engines' context (32,768 tokens; about 7 % of the trace) are left out. The
arrival times are compressed so the offered load is ``--load`` (default 1.0) of the fleet's
capacity *without* prefix reuse (``emulator.capacity`` on the same request mix): a policy
that reuses cached prefixes leaves its engines less loaded than that.

The fleet: 8 × A100-80GB / Llama-3.1-8B emulated engines (``emulator/``: continuous batching,
paged KV cache of 415k tokens each, vLLM-style prefix caching with LRU eviction, vLLM's
``/metrics`` and KV-cache events on ZeroMQ). Policies, each on a fresh fleet and router:

- ``round-robin``; ``least-in-flight`` (LiteLLM's least-busy);
- ``prefix-only``: always the backend with the longest cached match (the router's own
  index), fewest in flight on a tie — the hot-spotting baseline (SGLang's cache-aware
  policy without its balance thresholds);
- ``gie-style``: GIE's default scorer weights, ``prefix-cache-scorer`` 3,
  ``queue-scorer`` 2, ``kv-cache-utilization-scorer`` 2, max-score picker
  (``gateway-api-inference-extension: config/charts/inferencepool/templates/
  epp-config.yaml``), as llmroute's ``prefix-affinity``, ``queue-depth`` and ``kv-cache``
  scorers over the same router-side index (GIE's queue-scorer min-max normalises the
  waiting queue over the candidates; ``queue-depth`` is ``1 / (1 + waiting)``);
- ``llmroute``: the anchor's ``default`` preset with the router-side prefix index;
- ``llmroute-events``: the same reading the engines' KV-cache events (precise index).

Reported per policy (times in model seconds): P50/P95 TTFT (a request the client gave up
on counts at the ``--deadline``), throughput (completed requests and output tokens per
model second over the run), the fleet's prefix-cache hit rate (Σ hits / Σ queries of the
engines' ``vllm:prefix_cache_*`` counters), the KV spread (as ``bench/schedule.py``) and
failures. A plot of TTFT over time per policy goes to ``bench/results/prefix.png``.

``python bench/prefix.py [--quick | --smoke]`` (``--smoke``: 16 requests); the last line is
``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from modes import mode, pick, results_dir  # noqa: E402
from mooncake import TRACE, Prompts, Row, ideal_hit_rate, load, sample  # noqa: E402
from schedule import (  # noqa: E402
    Plan,
    Run,
    pct,
    replay_args,
    report_failures,
    Workers,
    run_main,
)

from llmroute.anchor.affinity import PrefixIndex  # noqa: E402
from llmroute.config import Config  # noqa: E402
from llmroute.emulator.capacity import saturation_throughput  # noqa: E402
from llmroute.emulator.spec import EngineSpec  # noqa: E402

ENGINE = ("a100-80g", "8b", 1)
ENGINES = 8
MAX_TOKENS = 32768
AFFINITY = 0.5
"""The ``prefix-affinity`` weight of llmroute's ``default`` preset (``anchor/presets.py``)."""
UNPRICED = {"events": False, "priced": False}
"""The baselines' prefix scorer: the router-side index, affinity alone (as GIE's)."""


def policies(affinity: float = AFFINITY) -> dict[str, dict[str, Any]]:
    """Each policy's ``anchor:`` config; ``affinity`` is llmroute's ``prefix-affinity``
    weight (the default preset's, unless tuning)."""
    return {
        "round-robin": {"preset": "round-robin"},
        "least-in-flight": {"preset": "least-in-flight"},
        "prefix-only": {"preset": "least-in-flight", "scorers": {
            "in-flight": 0.001, "prefix-affinity": {"weight": 1.0, "params": UNPRICED}}},
        "gie-style": {"preset": "least-in-flight", "scorers": {
            "in-flight": 0, "prefix-affinity": {"weight": 3.0, "params": UNPRICED},
            "queue-depth": 2.0, "kv-cache": 2.0}},
        "llmroute": {"preset": "default", "scorers": {
            "prefix-affinity": {"weight": affinity, "params": {"events": False}}}},
        "llmroute-events": {"preset": "default", "scorers": {"prefix-affinity": affinity}},
    }


def make_plan(rows: list[Row], n: int, wall_rps: float, load: float, deadline_s: float,
              seed: int) -> tuple[Plan, list[Row]]:
    """The fleet, ``n`` sampled requests and the time compression for ``load`` of the
    fleet's capacity without prefix reuse."""
    kept = sample(rows, n, MAX_TOKENS, seed)
    mix = [(r.input_tokens, r.output_tokens) for r in kept[:400]]
    capacity = ENGINES * saturation_throughput(EngineSpec(*ENGINE), mix)
    offered = load * capacity
    span = kept[-1].t - kept[0].t
    compress = (len(kept) / span) / offered
    time_scale = offered / wall_rps
    specs = [EngineSpec(*ENGINE, time_scale=time_scale, stream_interval=16,
                        served_model="fleet-model", seed=i, kv_events="tcp://127.0.0.1:*")
             for i in range(ENGINES)]
    schedule = [((r.t - kept[0].t) * compress * time_scale, r.input_tokens, r.output_tokens)
                for r in kept]
    return Plan(specs, schedule, time_scale, capacity, offered, deadline_s), kept


def router_config(anchor: dict[str, Any], engines: list[Any]) -> Config:
    """One pool over the engines (each with its KV-events endpoint), routed by ``anchor``;
    the rules gate (one pool: its verdict cannot change the route)."""
    backends = [{"id": f"gpu-{i}", "pool": "fleet", "engine": "emulator", "base_url": url,
                 "model": "fleet-model", "context_length": max_len, "kv_events": kv}
                for i, (url, max_len, kv) in enumerate(engines)]
    return Config.model_validate({
        "pools": {"fleet": {}}, "backends": backends, "routing": {"default_pool": "fleet"},
        "timeouts": {"ttft_s": 600, "total_s": 900, "stall_s": 300},
        "gate": {"kind": "rules"}, "anchor": anchor})


def hit_rate(run: Run) -> float:
    """The fleet's prefix-cache hit rate over the run (tokens hit / tokens queried)."""
    last = run.polls[-1] if run.polls else None
    if last is None or not last.queries:
        return math.nan
    return sum(last.hits) / max(sum(last.queries), 1)


def throughput(run: Run, plan: Plan) -> tuple[float, float]:
    """Completed requests and output tokens per model second, from the first send to the
    last completion."""
    done = [o for o in run.outcomes if o.status == "ok"]
    if not done:
        return 0.0, 0.0
    end = max(plan.schedule[o.index][0] + o.e2e_s for o in done) / plan.time_scale
    tokens = sum(plan.schedule[o.index][2] for o in done)
    return len(done) / end, tokens / end


def index_accuracy(run: Run, kept: list[Row], prompts: Prompts) -> tuple[float, float]:
    """The router-side index against the trace's true sharing, replayed on this run's
    routing (each request recorded on the backend that served it, in send order): ``(Σ
    tokens the index matched on that backend / Σ tokens truly shared with what that backend
    was sent before, share of requests where the two agree within one key)``. Neither
    counts evictions: the engines' own hit rate shows those."""
    index = PrefixIndex(capacity=1 << 20)
    sent: dict[str, set[tuple[int, ...]]] = collections.defaultdict(set)
    matched = true = agree = n = 0
    for o in sorted(run.outcomes, key=lambda o: o.index):
        if not o.backend:
            continue
        row = kept[o.index]
        keys = index.keys(prompts(row.input_tokens, o.index))
        limit = row.input_tokens - 1
        got = min(index.matched(keys).get(o.backend, 0) * index.block_tokens, limit)
        held = sent[o.backend]
        blocks = 0
        while blocks < len(row.hash_ids) and row.hash_ids[:blocks + 1] in held:
            blocks += 1
        shared = min(blocks * 512, limit)
        matched, true, n = matched + got, true + shared, n + 1
        agree += abs(got - shared) <= index.block_tokens
        index.record(keys, o.backend)
        held.update(row.hash_ids[:i + 1] for i in range(len(row.hash_ids)))
    return matched / max(true, 1), agree / max(n, 1)


def table(runs: list[Run], plan: Plan) -> str:
    """The human-readable comparison."""
    head = (f"{'policy':<17}{'n':>5}{'TTFT p50 s':>11}{'TTFT p95 s':>11}{'req/s':>7}"
            f"{'tok/s':>8}{'hit rate':>10}{'KV mean':>9}{'KV ±':>7}{'failed':>8}")
    lines = [head, "-" * len(head)]
    for r in runs:
        rps, tps = throughput(r, plan)
        lines.append(f"{r.policy:<17}{len(r.outcomes):>5}{pct(r.ttft(), .5):>11.3f}"
                     f"{pct(r.ttft(), .95):>11.3f}{rps:>7.2f}{tps:>8.0f}{hit_rate(r):>10.1%}"
                     f"{statistics.fmean(r.kv_means()):>9.1%}{r.kv_spread():>7.1%}"
                     f"{r.failure_rate():>8.2%}")
    return "\n".join(lines)


def spread(runs: list[Run]) -> str:
    """Requests per engine per policy (hot spots show as a tall column)."""
    lines = []
    for r in runs:
        counts = collections.Counter(o.backend for o in r.outcomes)
        cells = " ".join(f"{counts.get(f'gpu-{i}', 0):>4}" for i in range(ENGINES))
        lines.append(f"{r.policy:<17} requests per engine: {cells}")
    return "\n".join(lines)


def plot(runs: list[Run], plan: Plan, path: Path) -> None:
    """TTFT over time (rolling P50 and P95 of 25 requests by send time), one colour per
    policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 5))
    for r in runs:
        seen = sorted((plan.schedule[o.index][0] / plan.time_scale,
                       o.ttft_s / plan.time_scale if o.ttft_s is not None else plan.deadline_s)
                      for o in r.outcomes if o.status != "failed" or o.ttft_s is not None)
        xs, p95s, p50s = [], [], []
        for i in range(25, len(seen) + 1, 5):
            window = sorted(t for _, t in seen[i - 25:i])
            xs.append(seen[i - 1][0])
            p95s.append(pct(window, 0.95))
            p50s.append(pct(window, 0.5))
        line, = ax.plot(xs, p95s, label=f"{r.policy} P95")
        ax.plot(xs, p50s, color=line.get_color(), linestyle=":", alpha=0.7)
    ax.set(yscale="log", xlabel="request sent at (model s)",
           ylabel="TTFT (model s), rolling 25 requests",
           title="TTFT over time: P95 (solid), P50 (dotted)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def result(runs: list[Run], plan: Plan, kept: list[Row], prompts: Prompts) -> dict[str, Any]:
    """The RESULT figures: llmroute's ratios against the baselines of the same run, and the
    router-side index against the true sharing (``index_accuracy``) on llmroute's routing."""
    by = {r.policy: r for r in runs}
    p95 = {k: pct(r.ttft(), 0.95) for k, r in by.items()}
    hits = {k: hit_rate(r) for k, r in by.items()}

    def ratio(table: dict[str, float], mine: str, base: str) -> float | None:
        if mine not in table or base not in table or not table[base]:
            return None
        return round(table[mine] / table[base], 4)

    own = by.get("llmroute")
    accuracy = index_accuracy(own, kept, prompts) if own is not None else (None, None)
    return {
        "p95_ttft_ratio_vs_least_inflight": ratio(p95, "llmroute", "least-in-flight"),
        "p95_ttft_ratio_vs_prefix_only": ratio(p95, "llmroute", "prefix-only"),
        "p95_ttft_ratio_vs_gie_style": ratio(p95, "llmroute", "gie-style"),
        "p95_ttft_ratio_vs_round_robin": ratio(p95, "llmroute", "round-robin"),
        "hit_rate_ratio_vs_prefix_only": ratio(hits, "llmroute", "prefix-only"),
        "failure_rate": None if own is None else round(own.failure_rate(), 5),
        "index_matched_vs_true_shared": None if accuracy[0] is None else round(accuracy[0], 4),
        "index_agrees_within_one_key": None if accuracy[1] is None else round(accuracy[1], 4),
        "events_p95_ttft_ratio_vs_router_index": ratio(p95, "llmroute-events", "llmroute"),
        "events_hit_rate_ratio_vs_router_index": ratio(hits, "llmroute-events", "llmroute"),
        "p50_ttft_s": {k: round(pct(r.ttft(), 0.5), 4) for k, r in by.items()},
        "p95_ttft_s": {k: round(v, 4) for k, v in p95.items()},
        "hit_rate": {k: round(v, 4) for k, v in hits.items()},
        "throughput_rps": {k: round(throughput(r, plan)[0], 3) for k, r in by.items()},
        "kv_spread": {k: round(r.kv_spread(), 4) for k, r in by.items()},
        "failure_rate_by_policy": {k: round(r.failure_rate(), 5) for k, r in by.items()},
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Plan, run every policy, print the tables, save the plot; returns the RESULT."""
    rows = load(args.trace)
    size = mode(args)
    n = args.requests or pick(size, 800, 120, 16)
    # a smoke run's stragglers would hold each policy's run for the whole deadline
    deadline = pick(size, args.deadline, args.deadline, min(args.deadline, 3.0))
    plan, kept = make_plan(rows, n, args.wall_rps, args.load, deadline, args.seed)
    prompts = Prompts([r.hash_ids for r in kept])
    print(f"{len(kept)} requests (whole conversations, ≤ {MAX_TOKENS} tokens), mean prompt "
          f"{statistics.fmean(r.input_tokens for r in kept):.0f} tokens; sharing allows a "
          f"{ideal_hit_rate(kept):.1%} hit rate (one infinite cache); fleet capacity without "
          f"reuse {plan.capacity_rps:.2f} req/s, offered {plan.offered_rps:.2f} = "
          f"{args.load:.0%}; time scale {plan.time_scale:.2f} wall s per model s", flush=True)
    runs = []
    table_ = policies(args.affinity)
    async with Workers().start() as workers:  # the fleet and load processes, started once
        for name in args.policies:
            anchor = table_[name]
            if name.startswith("llmroute") and args.scorers:
                anchor = {**anchor, "scorers": {**anchor.get("scorers", {}), **args.scorers}}
            t0 = time.monotonic()
            runs.append(await workers.run(name, plan,
                                          lambda e, a=anchor: router_config(a, e), prompts))
            print(f"  {name}: {time.monotonic() - t0:.0f} s wall", flush=True)
    print(table(runs, plan))
    print(spread(runs))
    plot(runs, plan, results_dir() / "prefix.png")
    report_failures(runs, results_dir() / "prefix.png")
    return result(runs, plan, kept, prompts)


def main() -> int:
    """Command line entry; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    replay_args(p, "120 / 800", 6.0, 30.0, TRACE)
    p.add_argument("--load", type=float, default=1.0,
                   help="offered load, fraction of the capacity without prefix reuse")
    p.add_argument("--policies", nargs="+", default=list(policies()), choices=list(policies()))
    p.add_argument("--affinity", type=float, default=AFFINITY,
                   help="llmroute's prefix-affinity weight; for tuning")
    p.add_argument("--scorers", type=orjson.loads, default=None,
                   help="weights over the llmroute policies' scorers, JSON; for tuning")
    args = p.parse_args()
    return run_main("prefix", args, (args.trace / "conversation_trace.jsonl").is_file(),
                    main_async)


if __name__ == "__main__":
    raise SystemExit(main())
