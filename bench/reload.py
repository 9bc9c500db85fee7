"""Hot reload under load: latency before, during and after ``llmroute reload`` adds one
backend and drains another, the requests that failed, and how long the new set takes to
serve.

Processes: three emulated engines (A100/7B, ``time_scale`` 0.1: a request of 8 output tokens
takes ~11 ms) in one process; a real ``llmroute serve`` over two of them (``e0``, ``e1``;
gate off) in another; the open-loop load (``RATE`` non-streamed requests a second, each
counted by when it was sent) in this one. After the ``before`` phase the config file is
rewritten to ``e1`` and ``e2`` and ``llmroute reload --url …`` is run, as an operator
would: ``e2`` is health-checked and added, ``e0`` drains. Phases by send time: ``before``
(until the reload command starts), ``during`` (until ``DURING_S`` after it answered) and
``after`` (``phase_s`` more).

* ``reload_p95_wobble_ms``: the worst phase's P95 latency minus the ``before`` phase's
  (target ≤ 15 ms); P95 and P99 of every phase beside it;
* ``reload_failed``: requests not answered 200 over the whole run (target 0);
* ``reload_apply_s``: from starting ``llmroute reload`` to the first answer from ``e2``.

``python bench/reload.py [--quick | --smoke]`` (phases of 10, 4 or 1 s). The last line is
``RESULT {json}``.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from modes import mode, parser, pick  # noqa: E402
from served import config_text, emulated, seconds_to_ready, serve  # noqa: E402

from llmroute.emulator.spec import EngineSpec  # noqa: E402

RATE = 20.0
DURING_S = 1.0
BODY = {"model": "auto", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi " * 40}]}
Row = tuple[float, float, bool, str]
"""One request: sent (monotonic s), latency (ms), answered 200, backend that answered."""


async def one(session: aiohttp.ClientSession, url: str, rows: list[Row]) -> None:
    """One request, appended to ``rows`` when it ends."""
    sent = time.monotonic()
    try:
        async with session.post(url + "/v1/chat/completions", json=BODY) as resp:
            await resp.read()
            ok, backend = resp.status == 200, resp.headers.get("x-llmroute-backend", "")
    except aiohttp.ClientError:
        ok, backend = False, ""
    rows.append((sent, (time.monotonic() - sent) * 1000, ok, backend))


async def load(url: str, stop: asyncio.Event, rows: list[Row]) -> None:
    """``RATE`` requests a second until ``stop`` is set, each at its time however long the
    others take (open loop)."""
    async with aiohttp.ClientSession() as session:
        tasks, start, i = [], time.monotonic(), 0
        while not stop.is_set():
            await asyncio.sleep(max(start + i / RATE - time.monotonic(), 0.0))
            tasks.append(asyncio.ensure_future(one(session, url, rows)))
            i += 1
        await asyncio.gather(*tasks)


def reload(url: str) -> tuple[float, float]:
    """Run ``llmroute reload --url URL``; (start, end) in ``time.monotonic()`` seconds.
    Raises CalledProcessError when it is refused."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "llmroute.cli.main", "reload", "--url", url],
                   check=True, capture_output=True, text=True)
    return start, time.monotonic()


async def run(phase_s: float) -> dict[str, Any]:
    """The measurement (module docstring); returns the RESULT."""
    specs = [EngineSpec("a100-80g", "7b", time_scale=0.1, served_model="m", seed=i)
             for i in range(3)]
    rows: list[Row] = []
    with emulated(specs) as urls, tempfile.TemporaryDirectory() as tmp:
        work, path = Path(tmp), Path(tmp) / "config.yaml"
        path.write_text(config_text({"e0": urls[0], "e1": urls[1]}))
        server = serve("router", path, work)
        try:
            await asyncio.to_thread(seconds_to_ready, server, time.monotonic())
            stop = asyncio.Event()
            loading = asyncio.ensure_future(load(server.url, stop, rows))
            await asyncio.sleep(phase_s)
            path.write_text(config_text({"e1": urls[1], "e2": urls[2]}))
            started, answered = await asyncio.to_thread(reload, server.url)
            await asyncio.sleep(DURING_S + phase_s)
            stop.set()
            await loading
        finally:
            server.stop()
    return figures(rows, started, answered)


def pct(values: list[float], q: float) -> float:
    """Nearest-rank ``q``-quantile (0–1); NaN when empty."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else math.nan


def figures(rows: list[Row], started: float, answered: float) -> dict[str, Any]:
    """Per-phase percentiles, failures and the time to the new set (module docstring)."""
    bounds = {"before": (-math.inf, started), "during": (started, answered + DURING_S),
              "after": (answered + DURING_S, math.inf)}
    phases = {}
    for name, (lo, hi) in bounds.items():
        ms = [lat for sent, lat, ok, _ in rows if lo <= sent < hi and ok]
        phases[name] = {"requests": sum(1 for sent, *_ in rows if lo <= sent < hi),
                        "p50_ms": round(pct(ms, 0.5), 2), "p95_ms": round(pct(ms, 0.95), 2),
                        "p99_ms": round(pct(ms, 0.99), 2)}
    first_new = min((sent + lat / 1000 for sent, lat, ok, b in rows if ok and b == "e2"),
                    default=math.nan)
    base = phases["before"]["p95_ms"]
    wobble = max(phases["during"]["p95_ms"], phases["after"]["p95_ms"]) - base
    return {"reload_p95_wobble_ms": round(wobble, 2),
            "reload_failed": sum(1 for *_, ok, _ in rows if not ok),
            "reload_apply_s": round(first_new - started, 3),
            "reload_command_s": round(answered - started, 3),
            "reload_requests": len(rows), "reload_phases": phases,
            "reload_served_by": {b: sum(1 for *_, ok, x in rows if ok and x == b)
                                 for b in ("e0", "e1", "e2")},
            "target_reload_p95_wobble_ms": 15}


def main() -> int:
    """Command line entry; returns the exit code."""
    args = parser(__doc__.splitlines()[0]).parse_args()
    result = asyncio.run(run(pick(mode(args), 10.0, 4.0, 1.0)))
    print(f"{'phase':<8}{'requests':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}")
    for name, p in result["reload_phases"].items():
        print(f"{name:<8}{p['requests']:>9}{p['p50_ms']:>9}{p['p95_ms']:>9}{p['p99_ms']:>9}")
    print(f"failed {result['reload_failed']} of {result['reload_requests']}; new set serving "
          f"{result['reload_apply_s']} s after `llmroute reload` began (the command took "
          f"{result['reload_command_s']} s); served by {result['reload_served_by']}")
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
