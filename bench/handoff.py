"""Handoff benchmark: the gap a mid-stream handoff leaves in the client's stream, and whether
the text across the seam is exactly continuous, on two real local engines.

Setup: the real router (``create_app`` on loopback) over two ``llama-server`` engines on the
bundled SmolLM2-135M; pool ``forced`` (engine ``e1``) has an entropy threshold no real token
stays under, so every streamed answer trips at its 10th token and ``e2`` (pool ``steady``)
continues it — across pools, which ``routing.cross_pool_fallback`` allows. Every
conversation carries a unique system line, so neither engine has it cached. Two routers
share the engines: one as configured by default (cold: the fallback prefills the whole
conversation at the handoff), one with ``fuse.prewarm`` (the fallback was sent the
conversation when the stream began).

* gap: last primary token → first fallback token, as the router measures it (``gap_ms`` in
  the final chunk's ``llmroute.handoffs``) and as the client sees it (arrival times of the two
  chunks either side of the seam); p50/p95 in ms.
* seamless: the client's text equals prefix + what ``e2`` alone, asked greedily to continue
  that prefix, answers (its echo of the prefix removed) — exactly, character for character.
* baseline (same run): TTFT of an uncached conversation sent fresh to ``e2`` — what a
  client-side retry would wait before its first token (and it would then repeat the text).

RESULT: ``gap_*`` with prewarm, ``cold_gap_*`` without, ratios to the baseline.
``--quick``: 2 × 6 handoffs (< 3 min on 2 cores); ``--smoke``: 2 × 1. The last line is
``RESULT {json}``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from llmroute.api.app import create_app
from llmroute.config import parse_config
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


async def run(n: int) -> dict[str, Any]:
    """``n`` handoffs without and ``n`` with ``fuse.prewarm`` (two routers over the same two
    engines), each on a conversation no engine has cached, plus ``n`` cold fresh requests as
    the baseline; prints the table, returns RESULT."""
    cold_cfg = parse_config(CONFIG, "bench/handoff")
    warm_cfg = cold_cfg.model_copy(update={
        "fuse": cold_cfg.fuse.model_copy(update={"prewarm": True})})
    # Direct engine calls get a fresh connection each: llama-server may close an idle
    # keep-alive connection just as a client reuses it.
    fresh = httpx.Limits(max_keepalive_connections=0)
    async with open_runtime(cold_cfg) as rt, aiohttp.ClientSession() as session, \
            serve_in_background(create_app(cold_cfg, runtime=rt)) as cold_url, \
            serve_in_background(create_app(warm_cfg, runtime=wire(
                warm_cfg, rt.backends, session))) as warm_url, \
            httpx.AsyncClient(timeout=120, limits=fresh) as http:
        e2 = rt.backends["e2"].base_url
        await handoff(http, cold_url, conversation(PROMPTS[0], "warm-up"))
        rows = []
        for i in range(2 * n):
            mode, url = ("prewarm", warm_url) if i % 2 else ("cold", cold_url)
            row = await handoff(http, url, conversation(PROMPTS[i // 2 % len(PROMPTS)], i))
            cont = [*row["messages"], {"role": "assistant", "content": row["prefix"]}]
            echoed, _ = await direct(http, e2, cont, MAX_TOKENS - row["seam"]["at_token"])
            _, row["baseline_ttft_ms"] = await direct(
                http, e2, conversation(PROMPTS[i // 2 % len(PROMPTS)], f"base-{i}"), 4)
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
    print(f"{'#':>2} {'mode':>7} {'at':>3} {'router gap ms':>13} {'client gap ms':>13} "
          f"{'fresh TTFT ms':>13} seamless  seam")
    for i, r in enumerate(rows):
        print(f"{i:2d} {r['mode']:>7} {r['seam']['at_token']:3d} {r['seam']['gap_ms']:13.1f} "
              f"{r['client_gap_ms']:13.1f} {r['baseline_ttft_ms']:13.1f} "
              f"{'yes' if r['seamless'] else 'NO':>8}  {r['prefix'][-16:]!r}|{r['rest'][:16]!r}")
    warm = [r["seam"]["gap_ms"] for r in rows if r["mode"] == "prewarm"]
    cold = [r["seam"]["gap_ms"] for r in rows if r["mode"] == "cold"]
    base = [r["baseline_ttft_ms"] for r in rows]
    client = [r["client_gap_ms"] for r in rows if r["mode"] == "prewarm"]
    result = {"gap_p50_ms": round(statistics.median(warm), 1),
              "gap_p95_ms": round(pct(warm, 0.95), 1),
              "client_gap_p50_ms": round(statistics.median(client), 1),
              "cold_gap_p50_ms": round(statistics.median(cold), 1),
              "cold_gap_p95_ms": round(pct(cold, 0.95), 1),
              "seamless_fraction": sum(r["seamless"] for r in rows) / len(rows),
              "baseline_fresh_ttft_p50_ms": round(statistics.median(base), 1),
              "gap_vs_fresh_ttft": round(statistics.median(warm) / statistics.median(base), 2),
              "cold_gap_vs_fresh_ttft": round(statistics.median(cold) / statistics.median(base),
                                              2),
              "handoffs": len(rows), "target_gap_p50_ms": 150}
    print(f"\nhandoff gap p50 {result['gap_p50_ms']} ms, p95 {result['gap_p95_ms']} ms with "
          f"prewarm; {result['cold_gap_p50_ms']} ms / {result['cold_gap_p95_ms']} ms without; "
          f"a cold fresh request's TTFT p50 {result['baseline_fresh_ttft_p50_ms']} ms; "
          f"seamless {result['seamless_fraction']:.0%}")
    _plot(warm, cold, base)
    return result


def _plot(warm: list[float], cold: list[float], base: list[float]) -> None:
    """Save a gap histogram under bench/results/ when matplotlib is installed."""
    try:
        import matplotlib
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist([warm, cold, base], bins=12,
            label=["handoff gap (prewarm)", "handoff gap (cold)", "fresh request TTFT"])
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
