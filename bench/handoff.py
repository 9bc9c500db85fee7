"""Handoff benchmark: the gap a mid-stream handoff leaves in the client's stream, and whether
the text across the seam is exactly continuous, on two real local engines.

Setup: the real router (``create_app`` on loopback) over two ``llama-server`` engines on the
bundled SmolLM2-135M; pool ``forced`` (engine ``e1``) has an entropy threshold no real token
stays under, so every streamed answer trips at its 10th token and ``e2`` (pool ``steady``)
continues it — across pools, which ``routing.cross_pool_fallback`` allows. Every
conversation carries a unique system line, so neither engine has it cached. Four routers
share the engines, their handoffs interleaved (``MODES``):

* ``cold``: as configured by default (no ``fuse.prewarm``): the fallback is sent nothing
  until the fuse is suspect; from the first high-entropy token (here the first token, 9
  tokens before the trip) it is warmed with the text so far (``fuse.warm_on_suspect``);
* ``short``: the same with the default run length (3 tokens): 2 tokens of warning;
* ``unwarned``: ``warm_on_suspect: false``: the fallback prefills the whole conversation at
  the handoff — what every handoff after a failure (a cut, a 5xx) costs, as none warns;
* ``prewarm``: ``fuse.prewarm``: the fallback was sent the conversation when the stream
  began and follows it.

* gap: last primary token → first fallback token, as the router measures it (``gap_ms`` in
  the final chunk's ``llmroute.handoffs``) and as the client sees it (arrival times of the two
  chunks either side of the seam); p50/p95 in ms.
* seamless: the client's text equals prefix + what ``e2`` alone, asked greedily to continue
  that prefix, answers (its echo of the prefix removed) — exactly, character for character.
* baseline (same run): TTFT of an uncached conversation sent fresh to ``e2`` — what a
  client-side retry would wait before its first token (and it would then repeat the text).

RESULT: ``gap_*`` with prewarm, ``cold_gap_*`` as configured by default (target: p50 ≤
150 ms), ``cold_gap_*_short_warning``, ``unwarned_gap_*``, ratios to the baseline.
``--quick``: 4 × 6 handoffs (< 3 min on 2 cores); ``--smoke``: 4 × 1. The last line is
``RESULT {json}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from llmroute.api.app import create_app
from llmroute.config import Config, FuseConfig, parse_config
from llmroute.assemble.runtime import open_runtime, wire
from llmroute.api.server import serve_in_background
from llmroute.errors import EngineError

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from modes import mode, parser, pick, results_dir, skip  # noqa: E402

CONFIG = """\
pools:
  forced: {}
  steady: {}
backends:
  - {id: e1, pool: forced, engine: llamacpp, launch: {ctx_size: 2048, slots: 1, threads: 1}}
  - {id: e2, pool: steady, engine: llamacpp, launch: {ctx_size: 2048, slots: 1, threads: 1}}
routing: {default_pool: steady, cross_pool_fallback: true}
fuse:
  pools: {forced: {threshold_nats: 0.001, run_tokens: 10}}
"""
PROMPTS = ["Describe the city of Paris in three sentences.", "Why is the sky blue?",
           "Give three tips for learning to cook.", "What is photosynthesis?",
           "Write a short poem about the sea.", "Explain how a bicycle works.",
           "How do I make a cup of tea?", "What are the planets of the solar system?"]
MAX_TOKENS = 40


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0–1) of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def handoff(http: httpx.AsyncClient, url: str, messages: list[dict[str, Any]]
                  ) -> dict[str, Any]:
    """One streamed answer through the router at ``url``: its seam, gaps and the text
    either side."""
    body = {"model": "forced", "messages": messages, "max_tokens": MAX_TOKENS,
            "temperature": 0, "stream": True}
    arrivals: list[tuple[float, Any]] = []
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                arrivals.append((time.perf_counter(), json.loads(line[6:])))
    (seam,) = arrivals[-1][1]["llmroute"]["handoffs"]
    timed = [(t, c["choices"][0]["delta"].get("content") or "") for t, c in arrivals
             if c.get("choices")]
    content = [(t, s) for t, s in timed if s]
    k = seam["at_token"]
    return {"messages": messages, "seam": seam,
            "prefix": "".join(s for _, s in content[:k]),
            "rest": "".join(s for _, s in content[k:]),
            "client_gap_ms": (content[k][0] - content[k - 1][0]) * 1000}


async def direct(http: httpx.AsyncClient, url: str, messages: list[dict[str, Any]],
                 max_tokens: int) -> tuple[str, float]:
    """e2 alone, greedy: (its answer, its TTFT in ms) for ``messages``."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    start, ttft, text = time.perf_counter(), None, ""
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                piece = choice["delta"].get("content") or ""
                if piece and ttft is None:
                    ttft = (time.perf_counter() - start) * 1000
                text += piece
    return text, ttft or float("nan")


MODES = {"cold": {}, "short": {"pools": {"forced": {"threshold_nats": 0.001, "run_tokens": 3}}},
         "unwarned": {"warm_on_suspect": False}, "prewarm": {"prewarm": True}}
"""Each router's ``fuse`` settings over ``CONFIG``'s (module docstring)."""


def mode_config(base: Config, fuse: dict[str, Any]) -> Config:
    """``base`` with ``fuse`` merged into its fuse settings."""
    merged = {**base.fuse.model_dump(), **fuse}
    return base.model_copy(update={"fuse": FuseConfig.model_validate(merged)})


async def run(n: int) -> dict[str, Any]:
    """``n`` handoffs through each of the ``MODES``' routers (over the same two engines, the
    modes interleaved), each on a conversation no engine has cached, plus a cold fresh
    request per handoff as the baseline; prints the table, returns RESULT."""
    base = parse_config(CONFIG, "bench/handoff")
    configs = {mode: mode_config(base, fuse) for mode, fuse in MODES.items()}
    # Direct engine calls get a fresh connection each: llama-server may close an idle
    # keep-alive connection just as a client reuses it.
    fresh = httpx.Limits(max_keepalive_connections=0)
    async with contextlib.AsyncExitStack() as stack:
        rt = await stack.enter_async_context(open_runtime(base))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        urls = {mode: await stack.enter_async_context(serve_in_background(create_app(
            cfg, runtime=wire(cfg, rt.backends, session)))) for mode, cfg in configs.items()}
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=120, limits=fresh))
        e2 = rt.backends["e2"].base_url
        await handoff(http, urls["cold"], conversation(PROMPTS[0], "warm-up"))
        rows = []
        for i in range(len(MODES) * n):
            mode = list(MODES)[i % len(MODES)]
            prompt = PROMPTS[i // len(MODES) % len(PROMPTS)]
            row = await handoff(http, urls[mode], conversation(prompt, i))
            cont = [*row["messages"], {"role": "assistant", "content": row["prefix"]}]
            echoed, _ = await direct(http, e2, cont, MAX_TOKENS - row["seam"]["at_token"])
            _, row["baseline_ttft_ms"] = await direct(
                http, e2, conversation(prompt, f"base-{i}"), 4)
            row["seamless"] = echoed == row["prefix"] + row["rest"]
            row["mode"] = mode
            rows.append(row)
    return report(rows)


def conversation(prompt: str, nonce: Any) -> list[dict[str, Any]]:
    """``prompt`` behind a system line unique to ``nonce``, so no engine has it cached."""
    return [{"role": "system", "content": f"You are a helpful assistant (session {nonce})."},
            {"role": "user", "content": prompt}]


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Print per-handoff rows and the summary; return the RESULT object."""
    print(f"{'#':>2} {'mode':>8} {'at':>3} {'router gap ms':>13} {'client gap ms':>13} "
          f"{'fresh TTFT ms':>13} seamless  seam")
    for i, r in enumerate(rows):
        print(f"{i:2d} {r['mode']:>8} {r['seam']['at_token']:3d} {r['seam']['gap_ms']:13.1f} "
              f"{r['client_gap_ms']:13.1f} {r['baseline_ttft_ms']:13.1f} "
              f"{'yes' if r['seamless'] else 'NO':>8}  {r['prefix'][-16:]!r}|{r['rest'][:16]!r}")
    gaps = {mode: [r["seam"]["gap_ms"] for r in rows if r["mode"] == mode] for mode in MODES}
    base = statistics.median(r["baseline_ttft_ms"] for r in rows)
    client = [r["client_gap_ms"] for r in rows if r["mode"] == "prewarm"]

    def figures(prefix: str, suffix: str, mode: str) -> dict[str, float]:
        p50 = statistics.median(gaps[mode])
        return {f"{prefix}gap_p50_ms{suffix}": round(p50, 1),
                f"{prefix}gap_p95_ms{suffix}": round(pct(gaps[mode], 0.95), 1),
                f"{prefix}gap_vs_fresh_ttft{suffix}": round(p50 / base, 2)}

    result = {**figures("", "", "prewarm"),
              "client_gap_p50_ms": round(statistics.median(client), 1),
              **figures("cold_", "", "cold"), **figures("cold_", "_short_warning", "short"),
              **figures("unwarned_", "", "unwarned"),
              "seamless_fraction": sum(r["seamless"] for r in rows) / len(rows),
              "baseline_fresh_ttft_p50_ms": round(base, 1),
              "handoffs": len(rows), "target_gap_p50_ms": 150}
    print(f"\nhandoff gap p50 / p95: {result['cold_gap_p50_ms']} / {result['cold_gap_p95_ms']} "
          f"ms as configured by default (warned 9 tokens ahead), "
          f"{result['cold_gap_p50_ms_short_warning']} / "
          f"{result['cold_gap_p95_ms_short_warning']} ms warned 2 tokens ahead, "
          f"{result['unwarned_gap_p50_ms']} / {result['unwarned_gap_p95_ms']} ms unwarned, "
          f"{result['gap_p50_ms']} / {result['gap_p95_ms']} ms with prewarm; a cold fresh "
          f"request's TTFT p50 {result['baseline_fresh_ttft_p50_ms']} ms; "
          f"seamless {result['seamless_fraction']:.0%}")
    _plot(gaps, base)
    return result


def _plot(gaps: dict[str, list[float]], base: float) -> None:
    """Save a gap histogram per mode under the results folder when matplotlib is
    installed."""
    try:
        import matplotlib
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(list(gaps.values()), bins=12, label=[f"handoff gap ({m})" for m in gaps])
    ax.axvline(base, color="k", linestyle=":", label="fresh request TTFT p50")
    ax.set_xlabel("ms")
    ax.legend()
    fig.tight_layout()
    path = results_dir() / "handoff_gap.png"
    fig.savefig(path)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run, print ``RESULT {json}`` last."""
    ap = parser("Handoff gap and seam continuity of mid-stream handoffs on two real local "
                "engines.")
    ap.add_argument("-n", type=int, default=None, help="handoffs to measure")
    args = ap.parse_args(argv)
    n = args.n or pick(mode(args), 30, 6, 1)
    try:
        result = asyncio.run(run(n))
    except EngineError as err:
        skip(f"local engines are not available: {err.message}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
