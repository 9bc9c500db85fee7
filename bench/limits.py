"""Are the gateway's limits exact under concurrency, and is overload shed by class?

    python bench/limits.py [--quick | --smoke]

In-process: the app over ``httpx.ASGITransport``, a fast fixed-reply upstream
(``bench/lib/upstream.py``) on loopback, auth on with an in-memory state store.

1. ``rpm``: 200 concurrent clients on one key with an RPM limit, each retrying after the
   ``Retry-After`` it is given. Every admission is timed where it happens (the limiter);
   ``rpm_overshoot_max`` is the most requests admitted in any window beyond the token
   bucket's envelope (capacity + rate × window length; target 0).
2. ``tpm``: the same with a TPM limit; each request reserves prompt + ``max_tokens`` and
   is reconciled to the upstream's usage (22 tokens). ``tpm_overshoot_tokens_max`` is the
   most used tokens in any window beyond the envelope (target ≤ the largest reservation).
3. ``retry_after_error_s``: on an exhausted key, a refused request's ``Retry-After`` against
   when a retry is really admitted (found by polling every 20 ms; a refused poll takes
   nothing from the bucket), p95 over RPM and TPM refusals (target ≤ 1 s: the hint is the
   exact wait rounded up to whole seconds).
4. ``filter_mb_per_s``: ``bench/filter.py``'s streamed-output measurement (10,000 words).
5. ``shed_correct_fraction``: priority classes on one backend at its in-flight watermark,
   streamed ``standard`` and ``batch`` requests offered at twice what it serves; the
   fraction of the 503s that were ``batch`` (target 1.0).
6. Priority classes against FIFO: one upstream that serves ``SLO_SLOTS`` streams at a time
   and queues the rest in arrival order (an engine's queue), offered twice what it serves,
   one request in five ``high`` (TTFT target 0.5 s), the rest ``low`` (10 s) — once with
   the two classes and the router's admission queue at the upstream's slots, once without
   (every request goes straight to the upstream's FIFO queue). SLO attainment per class:
   the share of the class's requests whose first token came within its target (a 503
   counts as missed); ``slo_attainment_high_classes`` (target ≥ 0.98) beside
   ``slo_attainment_high_fifo``, and P99 TTFT per class (served requests) with
   ``p99_high_ratio_vs_fifo``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from aiohttp import web

from llmroute.api.app import create_app
from llmroute.assemble.policy import build_policy
from llmroute.assemble.runtime import make_backends, wire
from llmroute.assemble.stages import answer_stages
from llmroute.config import Config
from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Limits, Tenant

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "lib"))
from modes import mode, parser, pick  # noqa: E402
from upstream import make_app  # noqa: E402

ADMIN = "bench-admin-key"
CHAT = "/v1/chat/completions"
USED = 22  # the upstream's usage.total_tokens per answer
CLIENTS = 200


def body(max_tokens: int = 40, stream: bool = False) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": max_tokens, "stream": stream}


@contextlib.asynccontextmanager
async def upstream(chunks: int, delay_s: float, slots: int | None = None
                   ) -> AsyncIterator[str]:
    runner = web.AppRunner(make_app(chunks, delay_s, slots=slots))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def router(url: str, tmp: str, **extra: Any) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    data = {"pools": {"general": {}}, "routing": {"default_pool": "general"},
            "backends": [{"id": "a", "pool": "general", "engine": "vllm", "base_url": url}],
            "gate": {"kind": "off"}, **extra}
    cfg = Config.model_validate(data)
    async with aiohttp.ClientSession() as session:
        rt = wire(cfg, make_backends(cfg, {}), session)
        authed = cfg.model_copy(update={"auth": cfg.auth.model_copy(update={
            "enabled": True, "keys_path": f"{tmp}/keys.db", "admin_key_env": "BENCH_ADMIN"})})
        policy = rt.policy = build_policy(authed, environ={"BENCH_ADMIN": ADMIN})
        assert policy is not None
        rt.stages = answer_stages(rt)  # the usage meter with the policy
        transport = httpx.ASGITransport(app=create_app(cfg, runtime=rt))
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(transport=transport, base_url="http://r", limits=limits,
                                     timeout=60) as client:
            yield rt, client
        policy.keys.close()


class Timed:
    """The limiter, with the monotonic time of every admission and its reservation."""

    def __init__(self, inner: Any):
        self.inner, self.admitted = inner, []  # type: list[tuple[float, int]]

    async def admit(self, caller: Any, request: Any) -> Any:
        ticket = await self.inner.admit(caller, request)
        self.admitted.append((time.monotonic(), ticket.reserved))
        return ticket


async def new_key(rt: Any, limits: Limits) -> str:
    keys = rt.policy.keys
    if await keys.tenant("bench") is None:
        await keys.put_tenant(Tenant("bench"))
    secret, _ = await issue_key(keys, "bench", time.time(), limits=limits)
    return secret


def overshoot(events: list[tuple[float, float]], capacity: float, per_s: float) -> float:
    """Most admitted (summed weights) in any window [t_i, t_j] beyond capacity + rate·w."""
    worst = 0.0
    for i in range(len(events)):
        total = 0.0
        for j in range(i, len(events)):
            total += events[j][1]
            worst = max(worst, total - capacity - per_s * (events[j][0] - events[i][0]))
    return worst


async def hammer(client: httpx.AsyncClient, secret: str, seconds: float, max_tokens: int) -> int:
    """CLIENTS clients sending for ``seconds``, each sleeping its Retry-After when refused."""
    end, headers = time.monotonic() + seconds, {"authorization": f"Bearer {secret}"}

    async def one() -> int:
        sent = 0
        while time.monotonic() < end:
            r = await client.post(CHAT, json=body(max_tokens), headers=headers)
            sent += 1
            if r.status_code == 429:
                await asyncio.sleep(float(r.headers.get("retry-after", 1)))
        return sent

    return sum(await asyncio.gather(*(one() for _ in range(CLIENTS))))


async def exactness(url: str, tmp: str, seconds: float) -> dict[str, Any]:
    async with router(url, tmp) as (rt, client):
        timed = Timed(rt.policy.limiter)
        rt.policy = dataclasses.replace(rt.policy, limiter=timed)
        rpm = 120
        sent = await hammer(client, await new_key(rt, Limits(rpm=rpm)), seconds, 40)
        rpm_over = overshoot([(t, 1.0) for t, _ in timed.admitted], rpm, rpm / 60)
        rpm_n, timed.admitted = len(timed.admitted), []
        tpm, max_tokens = 6000, 100
        sent_t = await hammer(client, await new_key(rt, Limits(tpm=tpm)), seconds, max_tokens)
        tpm_over = overshoot([(t, float(USED)) for t, _ in timed.admitted], tpm, tpm / 60)
        largest = max((r for _, r in timed.admitted), default=0)
    return {"rpm_limit": rpm, "rpm_sent": sent, "rpm_admitted": rpm_n,
            "rpm_overshoot_max": math.floor(rpm_over + 1e-9),
            "tpm_limit": tpm, "tpm_sent": sent_t, "tpm_admitted": len(timed.admitted),
            "tpm_overshoot_tokens_max": round(max(tpm_over, 0.0), 1),
            "largest_reservation": largest}


async def retry_errors(url: str, tmp: str, samples: int) -> list[float]:
    errors: list[float] = []
    async with router(url, tmp) as (rt, client):
        for limits, tokens in ((Limits(rpm=240), 40), (Limits(tpm=1200), 100)):
            headers = {"authorization": f"Bearer {await new_key(rt, limits)}"}
            while (await client.post(CHAT, json=body(tokens), headers=headers)).status_code == 200:
                pass
            taken = 0
            while taken < samples:
                refused = await client.post(CHAT, json=body(tokens), headers=headers)
                if "retry-after" not in refused.headers:  # the bucket refilled meanwhile
                    continue
                t0, hint = time.monotonic(), float(refused.headers["retry-after"])
                while (await client.post(CHAT, json=body(tokens), headers=headers)).status_code != 200:
                    await asyncio.sleep(0.02)
                errors.append(abs(hint - (time.monotonic() - t0)))
                taken += 1
    return errors


async def shedding(url: str, tmp: str, seconds: float) -> dict[str, Any]:
    prio = {"classes": [{"name": "realtime", "ttft_target_s": 1},
                        {"name": "standard", "ttft_target_s": 10},
                        {"name": "batch", "ttft_target_s": 60}],
            "watermarks": {"in_flight": 4}, "max_queue": 16, "tick_s": 0.02}
    async with router(url, tmp, priority=prio) as (rt, client):
        rt.policy = None  # auth off: the class comes from the header
        outcomes: list[tuple[str, int]] = []

        async def one(cls: str) -> None:
            r = await client.post(CHAT, json=body(stream=True),
                                  headers={"x-llmroute-priority": cls})
            outcomes.append((cls, r.status_code))

        tasks, end = [], time.monotonic() + seconds
        while time.monotonic() < end:  # the backend serves ~20/s: offer 10 standard + 30 batch
            tasks += [asyncio.ensure_future(one("standard"))]
            tasks += [asyncio.ensure_future(one("batch")) for _ in range(3)]
            await asyncio.sleep(0.1)
        await asyncio.gather(*tasks)
    shed = [c for c, s in outcomes if s == 503]
    return {"offered": len(outcomes), "shed": len(shed),
            "shed_standard": shed.count("standard"),
            "served_standard": sum(1 for c, s in outcomes if c == "standard" and s == 200),
            "shed_correct_fraction": round(shed.count("batch") / len(shed), 4) if shed else 1.0}


SLO_SLOTS, SLO_CHUNKS, SLO_DELAY_S = 4, 10, 0.025
"""The SLO run's upstream: 4 streams at a time, each 10 chunks 25 ms apart (0.25 s a
request: 16 requests/s)."""
SLO_CLASSES = {"high": 0.5, "low": 10.0}
"""Class → TTFT target (s), highest first."""


async def slo_run(url: str, tmp: str, seconds: float, classes: bool
                  ) -> dict[str, list[float | None]]:
    """Offer twice the upstream's rate for ``seconds``, every fifth request ``high``;
    per class, each request's TTFT in seconds (None: refused)."""
    extra = {"priority": {"classes": [{"name": n, "ttft_target_s": t}
                                      for n, t in SLO_CLASSES.items()],
                          "watermarks": {"in_flight": SLO_SLOTS}, "tick_s": 0.02}} \
        if classes else {}
    ttfts: dict[str, list[float | None]] = {name: [] for name in SLO_CLASSES}
    async with router(url, tmp, **extra) as (rt, client):
        rt.policy = None  # auth off: the class comes from the header

        async def one(cls: str) -> None:
            start, first = time.monotonic(), None
            headers = {"x-llmroute-priority": cls} if classes else {}
            async with client.stream("POST", CHAT, json=body(stream=True),
                                     headers=headers) as r:
                async for line in r.aiter_lines():  # read to the end: the slot is held
                    if first is None and r.status_code == 200 and '"content"' in line:
                        first = time.monotonic() - start
            ttfts[cls].append(first)

        rate = 2 * SLO_SLOTS / (SLO_CHUNKS * SLO_DELAY_S)
        tasks, start = [], time.monotonic()
        for i in range(int(rate * seconds)):
            await asyncio.sleep(max(start + i / rate - time.monotonic(), 0.0))
            tasks.append(asyncio.ensure_future(one("high" if i % 5 == 0 else "low")))
        await asyncio.gather(*tasks)
    return ttfts


def slo_figures(fifo: dict[str, list[float | None]], classed: dict[str, list[float | None]]
                ) -> dict[str, Any]:
    """SLO attainment and P99 TTFT per class for both runs, and the keys of the RESULT."""
    def attainment(xs: list[float | None], target: float) -> float:
        return round(sum(x is not None and x <= target for x in xs) / max(len(xs), 1), 4)

    def p99(xs: list[float | None]) -> float | None:
        served = sorted(x for x in xs if x is not None)
        return round(served[max(0, math.ceil(0.99 * len(served)) - 1)], 4) if served else None

    out: dict[str, Any] = {}
    for mode_name, run in (("classes", classed), ("fifo", fifo)):
        for cls, target in SLO_CLASSES.items():
            out[f"slo_attainment_{cls}_{mode_name}"] = attainment(run[cls], target)
            out[f"p99_ttft_s_{cls}_{mode_name}"] = p99(run[cls])
            out[f"refused_{cls}_{mode_name}"] = sum(x is None for x in run[cls])
    hi, lo = out["p99_ttft_s_high_classes"], out["p99_ttft_s_high_fifo"]
    out["p99_high_ratio_vs_fifo"] = round(hi / lo, 4) if hi is not None and lo else None
    return out


def filter_speed(size: str) -> float:
    spec = importlib.util.spec_from_file_location("bench_filter", HERE / "filter.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = asyncio.run(mod.run(size))
    return float(res["ascii"]["mb_per_s"])


async def run(size: str) -> dict[str, Any]:
    seconds = pick(size, 30.0, 8.0, 1.0)
    with tempfile.TemporaryDirectory() as tmp:
        async with upstream(0, 0.0) as fast:
            exact = await exactness(fast, tmp, seconds)
            errors = await retry_errors(fast, tmp, pick(size, 10, 3, 1))
        async with upstream(5, 0.04) as slow:
            shed = await shedding(slow, tmp, pick(size, 15.0, 4.0, 1.0))
        slo_s = pick(size, 20.0, 6.0, 1.0)
        async with upstream(SLO_CHUNKS, SLO_DELAY_S, SLO_SLOTS) as engine:
            fifo = await slo_run(engine, tmp, slo_s, classes=False)
        async with upstream(SLO_CHUNKS, SLO_DELAY_S, SLO_SLOTS) as engine:
            classed = await slo_run(engine, tmp, slo_s, classes=True)
    p95 = sorted(errors)[max(0, math.ceil(0.95 * len(errors)) - 1)]
    return {**exact, "retry_after_error_s": round(p95, 3),
            "retry_after_error_median_s": round(statistics.median(errors), 3), **shed,
            **slo_figures(fifo, classed)}


def main() -> int:
    args = parser(__doc__).parse_args()
    res = asyncio.run(run(mode(args)))
    res["filter_mb_per_s"] = filter_speed(mode(args))
    for name, value in res.items():
        print(f"{name:<28}{value}")
    keys = ("rpm_overshoot_max", "tpm_overshoot_tokens_max", "largest_reservation",
            "retry_after_error_s", "filter_mb_per_s", "shed_correct_fraction",
            "slo_attainment_high_classes", "slo_attainment_high_fifo", "p99_high_ratio_vs_fifo",
            "slo_attainment_low_classes", "slo_attainment_low_fifo", "p99_ttft_s_high_classes",
            "p99_ttft_s_high_fifo", "refused_low_classes")
    print("RESULT " + json.dumps({k: res[k] for k in keys}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
