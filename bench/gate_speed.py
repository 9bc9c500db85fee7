"""Gate speed: per-request latency on one core (short ≤ 64 tokens, long ≥ 4k tokens) and
throughput under 32 concurrent callers, next to the same encoder run without the gate's
optimisations, in the same process.

- **gate**: ``SemanticGate`` as the router runs it, started and asked through its one
  entry point (``await gate.classify``): input compression (the latest turn's first 512 and
  last 256 characters), n-gram first stage, the int8 fine-tuned encoder (≤ 64 tokens of the
  latest turn, in the gate's worker thread) only below the confidence threshold and never for pasted
  material (a long prompt's document), micro-batching for concurrent callers. The cache is
  defeated (every prompt unique).
- **plain**: the same encoder on the uncompressed text (≤ 256 tokens) for every request,
  with the same embedding head, one request at a time in a worker thread.

Latency runs pinned to one core (``sched_setaffinity``; the gate measured there is started
after pinning, so its worker thread shares that core); throughput uses the machine's cores
(2 here), with a gate started after unpinning. Prompts: tests/data held-out sets (short) and the same prompts after ~16k
characters of document text (long).

    python bench/gate_speed.py [--quick | --smoke]

Last line: ``RESULT {"p50_short_ms", "p99_long_ms", "throughput_per_s", "speedup_vs_plain", …}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "lib"))
from modes import mode, parser, pick  # noqa: E402

from llmroute.config import GateConfig
from llmroute.gate.compress import prompt_request
from llmroute.gate.encoder import TunedEncoder
from llmroute.gate.model import GateModel
from llmroute.gate.semantic import SemanticGate
from llmroute.gate.pick import resolve
from llmroute.types import ChatRequest

FILLER = ("The quarterly report describes revenue, costs, staffing and the plans of each "
          "department in detail, with tables of figures and notes from the meetings. ")
CALLERS = 32


def prompts(n: int) -> list[str]:
    """``n`` short prompts from the held-out sets, made unique."""
    rows = []
    for name in ("gate_en_heldout.jsonl", "gate_zh_heldout.jsonl"):
        path = ROOT / "tests" / "data" / name
        rows += [json.loads(line)["text"] for line in path.read_text().splitlines() if line]
    return [f"{rows[i % len(rows)]} #{i}" for i in range(n)]


def long_prompts(n: int) -> list[str]:
    """``n`` prompts of ≥ 4k tokens (~16k characters of document, then the question)."""
    doc = FILLER * (16_500 // len(FILLER))
    return [f"Document {i}:\n{doc}\n\n{q}" for i, q in enumerate(prompts(n))]


class Plain:
    """The unoptimised baseline: the encoder on the raw text + the gate's embedding head."""

    def __init__(self, model: GateModel) -> None:
        self.encoder = TunedEncoder(resolve(), max_tokens=256)
        assert model.embed is not None
        self.head = model.embed

    def classify(self, request: ChatRequest) -> str:
        """The label from the embedding head over the whole (truncated) text."""
        p = self.head.proba(self.encoder.encode([request.text]))[0]
        return self.head.classes[int(p.argmax())]


def latencies(fn: Callable[[ChatRequest], object], texts: Sequence[str]) -> np.ndarray:
    """Per-call wall time in ms of ``fn`` over ``texts`` (requests built beforehand)."""
    requests = [prompt_request(t) for t in texts]
    out = []
    for r in requests:
        t0 = time.perf_counter()
        fn(r)
        out.append((time.perf_counter() - t0) * 1000)
    return np.array(out)


async def gate_latencies(call: Callable[[ChatRequest], Awaitable[object]],
                         texts: Sequence[str]) -> np.ndarray:
    """``latencies`` for an awaited ``call``, one request at a time."""
    requests = [prompt_request(t) for t in texts]
    out = []
    for r in requests:
        t0 = time.perf_counter()
        await call(r)
        out.append((time.perf_counter() - t0) * 1000)
    return np.array(out)


async def gate_latency(model: GateModel, n_short: int, n_long: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(short, long) per-request ms of a gate started on ``model`` (cache defeated)."""
    gate = SemanticGate(GateConfig(cache_size=1), model=model)
    await gate.start()
    short = await gate_latencies(gate.classify, prompts(n_short))
    long = await gate_latencies(gate.classify, long_prompts(n_long))
    await gate.close()
    return short, long


async def throughput(call: Callable[[ChatRequest], object], texts: Sequence[str]) -> float:
    """Classifications per second with ``CALLERS`` concurrent callers awaiting ``call``."""
    requests = [prompt_request(t) for t in texts]
    queue = list(reversed(requests))

    async def caller() -> None:
        while queue:
            await call(queue.pop())  # type: ignore[misc]

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(CALLERS)))
    return len(requests) / (time.perf_counter() - t0)


async def measure_throughput(model: GateModel, plain: Plain, n: int) -> tuple[float, float]:
    """(gate, plain) classifications/s on ``n`` unique short prompts each."""
    gate = SemanticGate(GateConfig(cache_size=1), model=model)
    await gate.start()
    fast = await throughput(gate.classify, prompts(n))
    pool = ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()

    async def one(r: ChatRequest) -> str:
        return await loop.run_in_executor(pool, plain.classify, r)

    slow = await throughput(one, [f"{t} plain" for t in prompts(n)])
    await gate.close()
    pool.shutdown()
    return fast, slow


def row(name: str, gate_ms: np.ndarray, plain_ms: np.ndarray) -> str:
    """One table line: p50/p99 for both and the p50 ratio."""
    g50, g99, p50, p99 = (float(np.percentile(a, q)) for a in (gate_ms, plain_ms) for q in (50, 99))
    return f"{name:<8}{g50:>9.2f}{g99:>9.2f}{p50:>10.2f}{p99:>10.2f}{p50 / g50:>9.1f}x"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0."""
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    n_short, n_long, n_tp = pick(mode(args), (1000, 200, 3200), (200, 40, 640), (8, 4, 64))
    cores = os.sched_getaffinity(0)
    model = SemanticGate(GateConfig()).load()
    plain = Plain(model)
    os.sched_setaffinity(0, {min(cores)})
    short_g, long_g = asyncio.run(gate_latency(model, n_short, n_long))
    short_p = latencies(plain.classify, prompts(n_short // 2))
    long_p = latencies(plain.classify, long_prompts(n_long // 2))
    os.sched_setaffinity(0, cores)
    tp_gate, tp_plain = asyncio.run(measure_throughput(model, plain, n_tp))
    print(f"one core; {len(cores)} cores for throughput; {CALLERS} callers")
    print(f"{'prompts':<8}{'gate p50':>9}{'p99':>9}{'plain p50':>10}{'p99':>10}{'ratio':>10}")
    print(row("short", short_g, short_p))
    print(row("long", long_g, long_p))
    print(f"throughput: gate {tp_gate:.0f}/s, plain {tp_plain:.0f}/s "
          f"({tp_gate / tp_plain:.1f}x)")
    result = {"p50_short_ms": round(float(np.percentile(short_g, 50)), 3),
              "p99_short_ms": round(float(np.percentile(short_g, 99)), 3),
              "p50_long_ms": round(float(np.percentile(long_g, 50)), 3),
              "p99_long_ms": round(float(np.percentile(long_g, 99)), 3),
              "throughput_per_s": round(tp_gate, 1),
              "plain_p50_short_ms": round(float(np.percentile(short_p, 50)), 3),
              "plain_p99_long_ms": round(float(np.percentile(long_p, 99)), 3),
              "plain_throughput_per_s": round(tp_plain, 1),
              "speedup_vs_plain": round(tp_gate / tp_plain, 2),
              "p50_short_speedup": round(float(np.median(short_p) / np.median(short_g)), 2),
              "p99_long_speedup": round(float(np.percentile(long_p, 99) /
                                              np.percentile(long_g, 99)), 2)}
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
