"""The cost of the strategy engine itself (issue 17's benchmark, first two figures).

* ``match_p99_ms`` — one ``StrategySet.choose`` (trigger matching + the matched strategy's
  plan) with 200 loaded strategies: 180 filed under intent labels (with keyword, regex,
  prompt-token, complexity and header conditions), 20 with no ``intents`` condition; requests
  of varied text (40–2000 characters), intents (composite ones too) and headers, drawn from
  a seeded RNG outside the timed region. Target: p99 ≤ 0.2 ms. Also reported: the p99 of
  the thread's CPU time (on a shared machine the wall p99 is mostly other processes' time).
  The regexes start with a literal (``select\s+\d+``): Python's ``re`` then skips ahead to
  the literal, ~1 µs per 2 KB; a pattern opening with ``\b`` or a class scans every
  position (~30–50 µs per 2 KB), which a strategy author pays per request it is checked on.
  Runs pinned to one core, as a router's event loop does.
* ``single_throughput_ratio`` — requests per second through the whole app
  (``httpx.ASGITransport``, gate ``off``, a fast fixed-reply upstream on loopback) with one
  catch-all ``single`` strategy loaded from a file, over the same with no strategy files
  (today's built-in path), rounds interleaved, medians compared. Target: ≥ 0.95.
* ``pipeline_added_ms`` — the median latency of one request served by a 3-step ``pipeline``
  (templates over the request and the earlier steps; gate ``off``; one request at a time)
  minus three times the median of one direct call to the same upstream (aiohttp): what the
  router adds on top of the three upstream calls — receiving and answering the client,
  matching, rendering, three legs through the anchor and dispatch. Rounds interleaved.
  Target: ≤ 3 ms. Also reported: ``single_added_ms``, the same for one ``single`` request.

* ``fusion_latency_ratio_vs_slowest`` — the median latency of a ``fusion`` over three voters
  whose upstreams answer after 20, 40 and 60 ms, over the median of the same request served
  by the slowest voter's pool alone (a ``single`` strategy); one request at a time, rounds
  interleaved. Target: ≤ 1.1 (the fan-out is parallel: fusion costs the slowest voter, not
  the sum).

``--quick`` uses fewer samples. Absolute times depend on the machine; ratios and medians
are what to quote. The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lib.modes import mode, parser, pick  # noqa: E402
from lib.upstream import make_app  # noqa: E402

from llmroute.api.app import create_app  # noqa: E402
from llmroute.assemble.runtime import make_backends, wire  # noqa: E402
from llmroute.config import Config  # noqa: E402
from llmroute.gate.intents import INTENTS  # noqa: E402
from llmroute.strategy.loader import Loader  # noqa: E402
from llmroute.strategy.protocol import KindContext  # noqa: E402
from llmroute.strategy.registry import register_builtins  # noqa: E402
from llmroute.strategy.snapshot import StrategySet  # noqa: E402
from llmroute.types import Backend, ChatRequest, Intent  # noqa: E402

POOLS = ("general", "code", "long")
WORDS = ("the", "error", "traceback", "summary", "sql", "select", "from", "price", "plan",
         "json", "rust", "python", "translate", "poem", "meeting", "contract", "数据", "café")


def strategy_set(n: int, rng: random.Random) -> StrategySet:
    """``n`` single strategies over three pools, built through the real loader."""
    backends = {f"{p}-1": Backend(f"{p}-1", p, "vllm", "http://x", p, 8192) for p in POOLS}
    loader = Loader(register_builtins(), KindContext(backends, {}, "general", 3))
    entries = [loader.parse(json.dumps(_spec(i, n, rng)), f"s{i}.json") for i in range(n)]
    return loader.builtin().replaced(entries)


def _spec(i: int, n: int, rng: random.Random) -> dict:
    when: dict = {}
    if i < n * 9 // 10:
        when["intents"] = rng.sample(INTENTS, rng.randint(1, 2))
    extra = rng.choice(["keywords"] * 3 + ["regex", "tokens", "complexity", "header", "none"])
    if extra == "keywords":
        when["keywords"] = rng.sample(WORDS, 3)
    elif extra == "regex":
        when["regex"] = rf"{rng.choice(WORDS)}\s+\d+"
    elif extra == "tokens":
        when["prompt_tokens"] = {"min": rng.randint(50, 400)}
    elif extra == "complexity":
        when["complexity"] = {"min": rng.uniform(1, 4)}
    elif extra == "header":
        when["tenant"] = [f"t{rng.randint(0, 9)}"]
    return {"strategy_id": f"s{i:03d}", "version": 1, "priority": rng.randint(0, 20),
            "kind": "single", "pool": rng.choice(POOLS), "when": when}


def _inputs(count: int, rng: random.Random) -> list[tuple[ChatRequest, Intent, dict]]:
    out = []
    for i in range(count):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 400)))[:2000]
        label = rng.choice(INTENTS)
        composite = (label, rng.choice(INTENTS)) if rng.random() < 0.2 else ()
        intent = Intent(label, rng.random(), conflict=rng.random(),
                        complexity=rng.uniform(0.1, 5), composite=composite)
        headers = {"x-llmroute-tenant": f"t{rng.randint(0, 19)}"} if i % 2 else {}
        out.append((ChatRequest("chat", {}, "auto", False, text, len(text) // 4, None, "r"),
                    intent, headers))
    return out


def match_times(n_strategies: int, samples: int) -> dict:
    """p50/p99 of one ``choose`` in ms (wall and thread CPU time) and the hit share."""
    rng = random.Random(17)
    s = strategy_set(n_strategies, rng)
    inputs = _inputs(samples, rng)
    wall, cpu, hits = [], [], 0
    gc.collect()
    for req, intent, headers in inputs:
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        m = s.choose(req, intent, headers)
        c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
        wall.append((t1 - t0) / 1e6)
        cpu.append((c1 - c0) / 1e6)
        hits += m.strategy_id != "builtin-single"
    return {"p50_ms": _q(wall, 0.5), "p99_ms": _q(wall, 0.99), "cpu_p99_ms": _q(cpu, 0.99),
            "matched_share": round(hits / samples, 3)}


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4)


async def _setup(name: str, text: str) -> tuple[web.AppRunner, int, Path]:
    """The fast upstream on a free loopback port, and a strategies folder holding ``text``
    as file ``name``."""
    runner = web.AppRunner(make_app(1, 0.0))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    folder = Path(tempfile.mkdtemp())
    (folder / name).write_text(text, encoding="utf-8")
    return runner, port, folder


async def throughput(requests: int, rounds: int) -> dict:
    """Median requests/s with and without a file ``single`` strategy, interleaved."""
    runner, port, folder = await _setup("all.yaml", "strategy_id: all\nversion: 1\n"
                                        "kind: single\npool: general\n")
    rates: dict[str, list[float]] = {"builtin": [], "file": []}
    try:
        for _ in range(rounds):
            for name, extra in (("builtin", {}), ("file", {"strategies": {
                    "dir": str(folder), "watch": False}})):
                rates[name].append(await _rate(port, extra, requests))
    finally:
        await runner.cleanup()
    b, f = statistics.median(rates["builtin"]), statistics.median(rates["file"])
    return {"builtin_rps": round(b, 1), "file_rps": round(f, 1), "ratio": round(f / b, 3)}


def _config(port: int, extra: dict) -> Config:
    return Config.model_validate({
        "pools": {"general": {}}, "routing": {"default_pool": "general"},
        "gate": {"kind": "off"}, **extra,
        "backends": [{"id": "up", "pool": "general", "engine": "vllm",
                      "base_url": f"http://127.0.0.1:{port}"}]})


BODY = {"model": "auto", "messages": [{"role": "user", "content": "hello there"}]}
PIPELINE = """strategy_id: three
version: 1
kind: pipeline
steps:
  - {name: extract, pool: general, prompt: "Extract: {{ request.last_user }}"}
  - {name: plan, pool: general, prompt: "Plan from {{ steps.extract.output }}"}
  - name: answer
    pool: general
    prompt: "Answer {{ request.last_user }} by {{ steps.plan.output }}"
"""


async def pipeline_latency(requests: int, rounds: int) -> dict:
    """Median latencies (ms): a 3-step pipeline, a single request, a direct upstream call."""
    runner, port, folder = await _setup("three.yaml", PIPELINE)
    ms: dict[str, list[float]] = {"direct": [], "single": [], "pipeline": []}
    try:
        for _ in range(rounds):
            ms["direct"] += await _direct(port, requests)
            ms["single"] += await _latencies(_config(port, {}), requests)
            ms["pipeline"] += await _latencies(_config(port, {"strategies": {
                "dir": str(folder), "watch": False}}), requests)
    finally:
        await runner.cleanup()
    m = {k: statistics.median(v) for k, v in ms.items()}
    return {"direct_ms": round(m["direct"], 3), "single_ms": round(m["single"], 3),
            "pipeline_ms": round(m["pipeline"], 3),
            "pipeline_added_ms": round(m["pipeline"] - 3 * m["direct"], 3),
            "single_added_ms": round(m["single"] - m["direct"], 3)}


VOTER_DELAYS_S = (0.02, 0.04, 0.06)
FUSION = """strategy_id: council
version: 1
kind: fusion
voters: [{pool: v0}, {pool: v1, weight: 2}, {pool: v2}]
"""
SLOWEST = "strategy_id: alone\nversion: 1\nkind: single\npool: v2\n"


async def fusion_latency(requests: int, rounds: int) -> dict:
    """Median latencies (ms): fusion over three delayed voters, the slowest voter alone."""
    runners, ports = [], []
    for delay in VOTER_DELAYS_S:
        runner = web.AppRunner(make_app(1, 0.0, delay))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        ports.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    ms: dict[str, list[float]] = {"fusion": [], "slowest": []}
    try:
        for _ in range(rounds):
            for name, text in (("slowest", SLOWEST), ("fusion", FUSION)):
                folder = Path(tempfile.mkdtemp())
                (folder / "s.yaml").write_text(text, encoding="utf-8")
                ms[name] += await _latencies(_voters_config(ports, folder), requests)
    finally:
        for runner in runners:
            await runner.cleanup()
    m = {k: statistics.median(v) for k, v in ms.items()}
    return {"fusion_ms": round(m["fusion"], 3), "slowest_ms": round(m["slowest"], 3),
            "ratio": round(m["fusion"] / m["slowest"], 3)}


def _voters_config(ports: list[int], folder: Path) -> Config:
    pools = [f"v{i}" for i in range(len(ports))]
    return Config.model_validate({
        "pools": {p: {} for p in pools}, "routing": {"default_pool": pools[0]},
        "gate": {"kind": "off"}, "strategies": {"dir": str(folder), "watch": False},
        "backends": [{"id": p, "pool": p, "engine": "vllm",
                      "base_url": f"http://127.0.0.1:{port}"}
                     for p, port in zip(pools, ports, strict=True)]})


async def _direct(port: int, requests: int) -> list[float]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    out = []
    async with aiohttp.ClientSession() as session:
        for i in range(requests + 20):
            t0 = time.perf_counter()
            async with session.post(url, json=BODY) as r:
                await r.read()
            if i >= 20:  # warm-up
                out.append((time.perf_counter() - t0) * 1000)
    return out


async def _latencies(config: Config, requests: int) -> list[float]:
    out = []
    async with aiohttp.ClientSession() as session:
        app = create_app(config, runtime=wire(config, make_backends(config, {}), session))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://router") as client:
            for i in range(requests + 20):
                t0 = time.perf_counter()
                r = await client.post("/v1/chat/completions", json=BODY)
                if i >= 20:  # warm-up
                    out.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text
    return out


async def _rate(port: int, extra: dict, requests: int) -> float:
    config = _config(port, extra)
    body = BODY
    async with aiohttp.ClientSession() as session:
        app = create_app(config, runtime=wire(config, make_backends(config, {}), session))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://router") as client:
            for _ in range(20):  # warm-up
                await client.post("/v1/chat/completions", json=body)
            t0 = time.perf_counter()
            for _ in range(requests // 8):
                await asyncio.gather(*(client.post("/v1/chat/completions", json=body)
                                       for _ in range(8)))
            return (requests // 8 * 8) / (time.perf_counter() - t0)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    samples, requests, rounds = pick(mode(args), (50_000, 2_000, 5), (5_000, 400, 3),
                                     (100, 16, 1))
    match = match_times(200, samples)
    print(f"matching, 200 strategies, {samples} requests: p50 {match['p50_ms']} ms, "
          f"p99 {match['p99_ms']} ms (CPU p99 {match['cpu_p99_ms']} ms), "
          f"{match['matched_share']:.0%} matched a file strategy")
    tp = asyncio.run(throughput(requests, rounds))
    print(f"throughput ({requests} requests x {rounds} rounds, 8 concurrent): built-in "
          f"{tp['builtin_rps']} req/s, file single {tp['file_rps']} req/s, ratio {tp['ratio']}")
    chain = asyncio.run(pipeline_latency(requests // 2, rounds))
    print(f"3-step pipeline, {requests // 2} requests x {rounds} rounds, one at a time: "
          f"median {chain['pipeline_ms']} ms vs direct upstream call {chain['direct_ms']} ms "
          f"→ added {chain['pipeline_added_ms']} ms (single: {chain['single_ms']} ms, added "
          f"{chain['single_added_ms']} ms)")
    fusion = asyncio.run(fusion_latency(requests // 8, rounds))
    print(f"fusion over 3 voters ({', '.join(f'{d * 1000:g}' for d in VOTER_DELAYS_S)} ms), "
          f"{requests // 8} requests x {rounds} rounds: median {fusion['fusion_ms']} ms vs "
          f"the slowest voter alone {fusion['slowest_ms']} ms → ratio {fusion['ratio']}")
    print("RESULT " + json.dumps({
        "match_p99_ms": match["p99_ms"], "match_p50_ms": match["p50_ms"],
        "match_cpu_p99_ms": match["cpu_p99_ms"], "single_throughput_ratio": tp["ratio"],
        "builtin_rps": tp["builtin_rps"], "file_rps": tp["file_rps"],
        "pipeline_added_ms": chain["pipeline_added_ms"],
        "single_added_ms": chain["single_added_ms"],
        "fusion_latency_ratio_vs_slowest": fusion["ratio"], "fusion_ms": fusion["fusion_ms"],
        "slowest_voter_ms": fusion["slowest_ms"],
        "machine": platform.machine(), "quick": args.quick, "smoke": args.smoke}))


if __name__ == "__main__":
    main()
