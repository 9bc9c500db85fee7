"""What observation costs per request, in process: the trace recorder's calls, finishing
the trace (ring + metrics), the per-request log line (rendered as ``llmroute serve``
renders it by default, JSON through orjson, to a memory sink) and queueing the
decision-audit record — each added in turn — plus the audit writer's own time per record
(in its thread, off the request path).

    python bench/observe_cost.py [--quick | --smoke]

Every figure is the median over rounds of the mean µs per request in one round; the
request path is simulated with the same calls ``flow/pipeline.py`` and ``dispatch/`` make
(receive, gate, strategy, anchor with two scored candidates, one attempt, the answer).
"""

from __future__ import annotations

import asyncio
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import structlog

from llmroute.config.observe import ObserveConfig
from llmroute.observe.metrics import Metrics
from llmroute.observe.observer import Observer, make_observer
from llmroute.observe.trace import Recorder
from llmroute.types import Backend, Candidate, Intent

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from modes import mode, parser, pick  # noqa: E402

BACKENDS = [Backend(f"b{i}", "general", "vllm", "http://x", "m", 4096) for i in range(2)]
CANDIDATES = [Candidate(b, 0.8 - i / 10, {"queue-depth": 0.9, "kv-cache": 0.7})
              for i, b in enumerate(BACKENDS)]
INTENT = Intent("chat", 0.91, (("code", 0.05), ("math", 0.04)), source="encoder")
ANSWER = {"choices": [{"finish_reason": "stop"}],
          "usage": {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52}}


def one_request(obs: Observer | None, i: int) -> None:
    """The recorder calls of one non-streamed request, then (with ``obs``) its finish."""
    rec = Recorder(f"req-{i}", f"req-{i}")
    rec.received(False, 12, "hello")
    rec.gate(INTENT)
    rec.strategy("builtin-single@0", "single", "general")
    rec.anchor(CANDIDATES)
    rec.attempt("b0", 0.004, None, 40, None, ok=True)
    rec.answered(ANSWER)
    if obs is not None:
        obs.finish(rec)


def observer(log: bool, audit: str | None) -> Observer:
    cfg = ObserveConfig.model_validate({"log_requests": log, "audit": {"path": audit}})
    return make_observer(cfg, Metrics(dict, [b.id for b in BACKENDS], time.monotonic))


async def measure(obs: Observer | None, n: int, rounds: int) -> float:
    """Median over ``rounds`` of the mean µs per request of ``n`` requests."""
    means = []
    for r in range(rounds):
        t = time.perf_counter()
        for i in range(n):
            one_request(obs, r * n + i)
        means.append((time.perf_counter() - t) / n * 1e6)
        await asyncio.sleep(0)  # the audit writer takes its batch between rounds
        if obs is not None and obs.audit is not None:
            await obs.audit.flush()
    return statistics.median(means)


async def writer_cost(path: str, n: int, batch: int = 50) -> float:
    """The audit writer thread's time per record (µs): building, chaining and inserting
    finished traces in batches of ``batch`` (~``writer.LINGER_S`` of traffic at 1,000
    requests/s), called directly as the thread calls it."""
    obs = observer(False, path)
    assert obs.audit is not None
    traces = []
    for i in range(n):
        rec = Recorder(f"req-{i}", f"req-{i}")
        rec.received(False, 12, "hello")
        rec.gate(INTENT)
        rec.anchor(CANDIDATES)
        rec.answered(ANSWER)
        traces.append((rec.finish(), "hello", "answer", obs.instance, None))
    t = time.perf_counter()
    for i in range(0, n, batch):
        assert obs.audit._write(traces[i:i + batch], 0)
    took = time.perf_counter() - t
    await obs.audit.close()
    return took / n * 1e6


async def run(size: str) -> dict[str, Any]:
    n, rounds = pick(size, (10000, 15), (2000, 5), (100, 2))
    structlog.configure(processors=[structlog.processors.add_log_level,
                                    structlog.processors.TimeStamper(fmt="iso"),
                                    structlog.processors.JSONRenderer(serializer=orjson.dumps)],
                        logger_factory=structlog.BytesLoggerFactory(io.BytesIO()),
                        cache_logger_on_first_use=False)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {
            "recorder": None, "finish (ring + metrics)": observer(False, None),
            "+ log line": observer(True, None),
            "+ audit queue": observer(True, str(Path(tmp) / "audit.sqlite3"))}
        out = {name: await measure(obs, n, rounds) for name, obs in paths.items()}
        write = await writer_cost(str(Path(tmp) / "w.sqlite3"), n)
    return {"us_per_request": {k: round(v, 2) for k, v in out.items()},
            "audit_writer_us_per_record": round(write, 2)}


def main() -> int:
    args = parser(__doc__).parse_args()
    res = asyncio.run(run(mode(args)))
    print(f"{'path':<26}{'µs/request':>12}")
    for name, us in res["us_per_request"].items():
        print(f"{name:<26}{us:>12.2f}")
    print(f"{'audit writer (thread)':<26}{res['audit_writer_us_per_record']:>12.2f} µs/record")
    full = res["us_per_request"]["+ audit queue"]
    print("RESULT " + json.dumps({"observed_us_per_request": full,
                                  "added_p50_ms_observed": round(full / 1000, 4), **res}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
