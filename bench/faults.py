"""Faults benchmark: N concurrent streams through the real router (``create_app`` served by
uvicorn) over three scripted engines (``bench/lib/faulty.py``) that, per request, cut the
connection at a random byte offset, stall past the stall bound, answer 500, end the body
cleanly before any ``finish_reason``, or crawl (``slow``: 3 words a second after the first,
under the router's 5 tokens/s floor over 0.5 s, ``fuse.slow``, yet every word inside the
stall bound).

The router, the engines and the clients run in three processes, as they would in a real
deployment: in one event loop the clients' and engines' own work delayed the router's timers
and the clients' reads, so the bench measured its own loop's lag as recovery time.

Each client stream is classified from what it received:

* complete: a ``finish_reason`` and ``[DONE]``; its text is compared with the scripted reply
  (``duplicated_or_missing_seam_text``: complete streams whose text differs, target 0);
* error: an OpenAI error answer (HTTP 4xx/5xx) or an in-band error event — an honest end;
* lost: neither (the connection dropped, or ``[DONE]`` without ``finish_reason``), target 0;
  ``false_complete_streams``: ``[DONE]`` without ``finish_reason``, target 0.

``p95_recovery_s``: per fault an engine dealt a stream (its ``fault_at``, one monotonic
clock across the processes), the time from the fault — or from the client's last event
before it, when bytes sent before the fault were still on their way — to the client's next
event (the continuation, or an honest error event); target ≤ the stall/TTFT bound + 0.5 s.
It used to be the stream's longest silence from the request on, which also counted the
router's queueing of the burst before any fault: that is now ``p95_first_event_unfaulted_s``
(request → first event of streams no fault touched), the same run's baseline. A silence
spanning several faults (a stall whose fallback answers 500, …) sums several recoveries and
is reported apart (``p95_multi_fault_recovery_s``). A crawl keeps sending, so its recovery
is timed to the first event the next backend sent (the event after the handoff's
``at_token`` in the stream's ``llmroute`` field): ``slow_p95_recovery_s`` (target ≤ 1.5 s);
``slow_recovered`` counts crawls the router dealt with: handed off and followed by an event
from the next backend (its continuation, or an honest error event when that one failed
too), or, on the request's last candidate with nowhere to go, finished at its own pace with
the exact text, or ended by an honest error event (whose stream lists no handoffs: a later
fault spent the budget) (target: all of ``slow_faults``); ``slow_handoffs`` those handed
off and listed; ``slow_handoffs_unprovoked`` slow handoffs of streams no crawl touched (the
router's own loop lag mistaken for a slow engine; seamless all the same). ``loop_lag_p99_ms``: how late each
process's event loop woke for a 10 ms timer (router, engines, clients): a starving process
shows there. ``--quick``: 60 streams (default 200; ``--smoke``: 8). The last line is
``RESULT {json}``.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import multiprocessing
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from fault_procs import (  # noqa: E402
    STALL_S,
    TTFT_S,
    engines_main,
    p99_ms,
    router_main,
    ticker_lag,
)
from faulty import FAULTS, REPLY  # noqa: E402
from modes import mode, parser, pick  # noqa: E402

WEIGHTS = (0.5, 0.2, 0.1, 0.1, 0.1, 0.1)  # ok, cut, stall, 500, end, slow


@dataclass
class Seen:
    """One client stream: text, finish_reason, [DONE], error, when it was sent (``asked``) and
    when each event arrived (``arrivals``), ``time.monotonic()`` seconds, and the handoffs
    its last chunk listed."""

    text: str = ""
    finish: str | None = None
    done: bool = False
    error: bool = False
    asked: float = 0.0
    arrivals: list[float] = field(default_factory=list)
    handoffs: list[dict[str, Any]] = field(default_factory=list)


async def _client(session: aiohttp.ClientSession, url: str, i: int) -> Seen:
    seen = Seen(asked=time.monotonic())
    body = {"model": "general", "stream": True, "messages": [
        {"role": "system", "content": f"stream {i}"}, {"role": "user", "content": "Go."}]}
    try:
        async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
            if resp.status != 200:
                seen.error = "error" in await resp.json(content_type=None)
                return seen
            async for raw in resp.content:
                if raw.startswith(b"data:"):
                    seen.arrivals.append(time.monotonic())
                _absorb(seen, raw.decode().strip())
    except aiohttp.ClientError:
        pass
    return seen


def _absorb(seen: Seen, line: str) -> None:
    if not line.startswith("data:"):
        return
    data = line[5:].strip()
    if data == "[DONE]":
        seen.done = True
        return
    obj = json.loads(data)
    if "error" in obj:
        seen.error = True
    seen.handoffs = (obj.get("llmroute") or {}).get("handoffs") or seen.handoffs
    for choice in obj.get("choices") or []:
        seen.text += (choice.get("delta") or {}).get("content") or ""
        seen.finish = choice.get("finish_reason") or seen.finish


async def run(n: int, seed: int, weights: tuple[float, ...] = WEIGHTS) -> dict[str, Any]:
    """Stream ``n`` requests at once through the router, each engine drawing its faults
    with ``weights`` (``FAULTS`` order); the RESULT figures."""
    ctx = multiprocessing.get_context("spawn")
    eng_end, eng_child = ctx.Pipe()
    rt_end, rt_child = ctx.Pipe()
    engines = ctx.Process(target=engines_main, args=(eng_child, seed, weights), daemon=True)
    engines.start()
    urls = await asyncio.to_thread(eng_end.recv)
    router = ctx.Process(target=router_main, args=(rt_child, urls), daemon=True)
    router.start()
    try:
        url = await asyncio.to_thread(rt_end.recv)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(60)) as session:
            lag: list[float] = []
            ticker = asyncio.create_task(ticker_lag(lag))
            start = time.monotonic()
            seen = await asyncio.gather(*(_client(session, url, i) for i in range(n)))
            wall = time.monotonic() - start
            ticker.cancel()
        eng_end.send("stop")
        log, engines_lag = await asyncio.to_thread(eng_end.recv)
        rt_end.send("stop")
        router_lag = await asyncio.to_thread(rt_end.recv)
    finally:
        for proc in (router, engines):
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
    return {**_figures(seen, log, wall), "loop_lag_p99_ms": {
        "router": router_lag, "engines": engines_lag, "clients": p99_ms(lag)}}


Log = list[tuple[str, str, float, float | None]]


def _figures(seen: list[Seen], log: Log, wall: float) -> dict[str, Any]:
    complete = [s for s in seen if s.finish and s.done]
    single, multi = _recoveries(seen, log)
    struck = {marker for marker, _, _, at in log if at is not None}
    calm = [s.arrivals[0] - s.asked for i, s in enumerate(seen)
            if f"stream {i}" not in struck and s.arrivals]
    target = max(TTFT_S, STALL_S) + 0.5
    single = [(f, r) for f, r in single if f != "slow"]  # a crawl is timed apart
    p95 = _p95([r for _, r in single])
    return {
        "streams": len(seen), "complete": len(complete),
        "errors": sum(s.error and not s.finish for s in seen),
        "lost_streams": sum(not (s.finish and s.done) and not s.error for s in seen),
        "false_complete_streams": sum(s.done and not s.finish for s in seen),
        "duplicated_or_missing_seam_text": sum(s.text != REPLY for s in complete),
        "faults_recovered": len(single), "multi_fault_silences": len(multi),
        "upstream_faults": {f: sum(x[1] == f for x in log) for f in FAULTS},
        "p95_recovery_s": round(p95, 3),
        "p95_recovery_by_fault_s": {f: round(_p95([r for k, r in single if k == f]), 3)
                                    for f in FAULTS[1:] if f != "slow"},
        "p95_multi_fault_recovery_s": round(_p95(multi), 3),
        "p95_first_event_unfaulted_s": round(_p95(calm), 3),
        **_slow(seen, log),
        "recovery_target_s": target, "recovery_vs_target": round(p95 / target, 2),
        "wall_s": round(wall, 2)}


def _recoveries(seen: list[Seen], log: Log) -> tuple[list[tuple[str, float]], list[float]]:
    """Per silence that faults caused (``_silence_after``), the time from the fault (the
    earliest, or the client's last event before the silence when that came later) to the
    client's next event: ``(fault, seconds)`` for silences that span one fault, seconds for
    those that span several. A fault after the client's last event (the stream ended
    there) has no recovery to time."""
    faults: dict[str, list[tuple[str, float]]] = {}
    for marker, fault, _, fault_at in log:
        if fault_at is not None:
            faults.setdefault(marker, []).append((fault, fault_at))
    single: list[tuple[str, float]] = []
    multi: list[float] = []
    for i, s in enumerate(seen):
        times = [s.asked, *s.arrivals]
        spans: dict[int, list[tuple[str, float]]] = {}
        for fault, at in faults.get(f"stream {i}", []):
            k = _silence_after(times, at)
            if k is not None:
                spans.setdefault(k, []).append((fault, at))
        for k, hits in spans.items():
            took = times[k] - max(times[k - 1], min(at for _, at in hits))
            if len(hits) == 1:
                single.append((hits[0][0], took))
            else:
                multi.append(took)
    return single, multi


def _slow(seen: list[Seen], log: Log) -> dict[str, Any]:
    """The crawls' figures (module docstring): per stream, its k-th crawl is matched with its
    k-th ``slow`` handoff, whose first event from the next backend is the stream's event
    number ``at_token``."""
    crawls: dict[int, list[float]] = {}
    for marker, fault, _, at in log:
        if fault == "slow" and at is not None:
            crawls.setdefault(int(marker.split()[-1]), []).append(at)
    recovered = handed = 0
    took: list[float] = []
    for i, ats in crawls.items():
        s = seen[i]
        slow = [h for h in s.handoffs if h.get("reason") == "slow"]
        for at, h in zip(sorted(ats), slow):
            handed += 1
            if h["at_token"] < len(s.arrivals):
                took.append(s.arrivals[h["at_token"]] - at)
                recovered += 1
        left = len(ats) - len(slow)  # not listed: on the last candidate, or the stream
        whole = s.finish and s.done and s.text == REPLY  # ended by an error event (which
        recovered += left if left > 0 and (whole or s.error) else 0  # lists no handoffs)
    unprovoked = sum(h.get("reason") == "slow" for i, s in enumerate(seen) if i not in crawls
                     for h in s.handoffs)
    return {"slow_faults": sum(map(len, crawls.values())), "slow_recovered": recovered,
            "slow_handoffs": handed, "slow_handoffs_unprovoked": unprovoked,
            "slow_p95_recovery_s": round(_p95(took), 3)}


IN_FLIGHT_S = 0.25
"""How long bytes an engine sent just before its fault may still reach the client."""


def _silence_after(times: list[float], at: float) -> int | None:
    """The index k of the silence ``times[k-1] → times[k]`` that a fault at ``at`` caused:
    the longest one that ends after ``at`` and begins before ``at + IN_FLIGHT_S`` (events
    the engine sent before the fault may arrive after it); None when no event followed."""
    first = max(bisect.bisect_right(times, at), 1)
    last = bisect.bisect_right(times, at + IN_FLIGHT_S)
    ks = range(first, min(last + 1, len(times)))
    return max(ks, key=lambda k: times[k] - times[k - 1], default=None)


def _p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20)[-1] if len(xs) >= 2 else (xs[0] if xs else 0.0)


def main(argv: list[str] | None = None) -> None:
    """``python bench/faults.py [--quick | --smoke] [--streams N] [--seed S]``."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--streams", type=int)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    n = args.streams or pick(mode(args), 200, 60, 8)
    result = asyncio.run(run(n, args.seed))
    for key, value in result.items():
        print(f"{key:34} {value}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
