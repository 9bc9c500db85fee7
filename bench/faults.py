"""Faults benchmark: N concurrent streams through the real router (``create_app`` on
loopback) over three scripted engines (``bench/lib/faulty.py``) that, per request, cut the
connection at a random byte offset, stall past the stall bound, answer 500, or end the body
cleanly before any ``finish_reason``.

Each client stream is classified from what it received:

* complete: a ``finish_reason`` and ``[DONE]``; its text is compared with the scripted reply
  (``duplicated_or_missing_seam_text``: complete streams whose text differs, target 0);
* error: an OpenAI error answer (HTTP 4xx/5xx) or an in-band error event — an honest end;
* lost: neither (the connection dropped, or ``[DONE]`` without ``finish_reason``), target 0;
  ``false_complete_streams``: ``[DONE]`` without ``finish_reason``, target 0.

``p95_recovery_s``: over streams whose first leg faulted, the longest silence the client saw
(request → first event, or between two events); target ≤ the stall/TTFT bound + 0.5 s.
``--quick``: 60 streams (default 200). The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from faulty import FAULTS, REPLY, Faulty  # noqa: E402

from llmroute.api.app import create_app  # noqa: E402
from llmroute.api.server import serve_in_background  # noqa: E402
from llmroute.assemble.runtime import make_backends, wire  # noqa: E402
from llmroute.config import Config  # noqa: E402

TTFT_S, STALL_S = 1.0, 0.5
WEIGHTS = (0.5, 0.2, 0.1, 0.1, 0.1)  # ok, cut, stall, 500, end


@dataclass
class Seen:
    """One client stream: text, finish_reason, [DONE], error, and event arrival gaps."""

    text: str = ""
    finish: str | None = None
    done: bool = False
    error: bool = False
    gaps: list[float] = field(default_factory=list)


def _config(urls: list[str]) -> Config:
    return Config.model_validate({
        "pools": {"general": {}}, "routing": {"default_pool": "general"},
        "gate": {"kind": "off"},
        "timeouts": {"ttft_s": TTFT_S, "stall_s": STALL_S, "total_s": 30},
        "retry": {"max_attempts": 3},
        "backends": [{"id": f"e{i}", "pool": "general", "engine": "vllm", "base_url": u}
                     for i, u in enumerate(urls)]})


async def _client(session: aiohttp.ClientSession, url: str, i: int) -> Seen:
    seen, last = Seen(), time.monotonic()
    body = {"model": "general", "stream": True, "messages": [
        {"role": "system", "content": f"stream {i}"}, {"role": "user", "content": "Go."}]}
    try:
        async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
            if resp.status != 200:
                seen.error = "error" in await resp.json(content_type=None)
                return seen
            async for raw in resp.content:
                now = time.monotonic()
                seen.gaps.append(now - last)
                last = now
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
    for choice in obj.get("choices") or []:
        seen.text += (choice.get("delta") or {}).get("content") or ""
        seen.finish = choice.get("finish_reason") or seen.finish


async def run(n: int, seed: int, weights: tuple[float, ...] = WEIGHTS) -> dict[str, Any]:
    """Stream ``n`` requests at once through the router, each engine drawing its faults
    with ``weights`` (``FAULTS`` order); the RESULT figures."""
    rng = random.Random(seed)
    engines = [Faulty(random.Random(rng.random()), weights, hold_s=STALL_S * 6)
               for _ in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(_serve_engine(e)) for e in engines]
        session = await stack.enter_async_context(aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(60)))
        cfg = _config(urls)
        app = create_app(cfg, runtime=wire(cfg, make_backends(cfg, {}), session))
        url = await stack.enter_async_context(serve_in_background(app))
        start = time.monotonic()
        seen = await asyncio.gather(*(_client(session, url, i) for i in range(n)))
        wall = time.monotonic() - start
    return _figures(seen, engines, wall)


@contextlib.asynccontextmanager
async def _serve_engine(engine: Faulty) -> Any:
    runner = web.AppRunner(engine.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _figures(seen: list[Seen], engines: list[Faulty], wall: float) -> dict[str, Any]:
    first: dict[str, str] = {}
    for marker, fault, _ in sorted((x for e in engines for x in e.log), key=lambda x: x[2]):
        first.setdefault(marker, fault)
    complete = [s for s in seen if s.finish and s.done]
    faulted = [max(s.gaps) for i, s in enumerate(seen)
               if first.get(f"stream {i}", "ok") != "ok" and s.gaps]
    return {
        "streams": len(seen), "complete": len(complete),
        "errors": sum(s.error and not s.finish for s in seen),
        "lost_streams": sum(not (s.finish and s.done) and not s.error for s in seen),
        "false_complete_streams": sum(s.done and not s.finish for s in seen),
        "duplicated_or_missing_seam_text": sum(s.text != REPLY for s in complete),
        "faulted_first_legs": len(faulted),
        "upstream_faults": {f: sum(x[1] == f for e in engines for x in e.log)
                            for f in FAULTS},
        "p95_recovery_s": round(_p95(faulted), 3),
        "recovery_target_s": max(TTFT_S, STALL_S) + 0.5, "wall_s": round(wall, 2)}


def _p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20)[-1] if len(xs) >= 2 else (xs[0] if xs else 0.0)


def main(argv: list[str] | None = None) -> None:
    """``python bench/faults.py [--quick] [--streams N] [--seed S]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--streams", type=int)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    n = args.streams or (60 if args.quick else 200)
    result = asyncio.run(run(n, args.seed))
    for key, value in result.items():
        print(f"{key:34} {value}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
