"""Load generator for overhead benchmarks, run as its own process (pinned to its own core).

``python bench/_loadgen.py SPEC_JSON`` prints one JSON line: ``latencies_ms`` (one per
completed request, end of answer for streams), ``errors``, ``chunks`` (SSE events received)
and ``duration_s``. SPEC keys: ``url``, ``model``, ``stream``, ``mode`` (``closed``: ``clients``
back-to-back; ``open``: ``rate`` requests/s at fixed intervals), ``duration_s``, ``warmup_s``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp


def _body(model: str, stream: bool) -> bytes:
    return json.dumps({"model": model, "stream": stream, "max_tokens": 32,
                       "messages": [{"role": "user", "content": "Say hello to the benchmark."}]}
                      ).encode()


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool,
               out: dict) -> None:
    start = time.perf_counter()
    try:
        async with session.post(url, data=body,
                                headers={"content-type": "application/json"}) as resp:
            if stream:
                async for line in resp.content:
                    out["chunks"] += line.startswith(b"data: ")
            else:
                await resp.read()
            ok = resp.status == 200
    except aiohttp.ClientError:
        ok = False
    if out["recording"]:
        if ok:
            out["latencies_ms"].append((time.perf_counter() - start) * 1000)
        else:
            out["errors"] += 1


async def _closed(spec: dict, session: aiohttp.ClientSession, body: bytes, out: dict,
                  stop_at: float) -> None:
    async def client() -> None:
        while time.perf_counter() < stop_at:
            await _one(session, spec["url"], body, spec["stream"], out)
    await asyncio.gather(*(client() for _ in range(spec["clients"])))


async def _open(spec: dict, session: aiohttp.ClientSession, body: bytes, out: dict,
                stop_at: float) -> None:
    interval, tasks, next_at = 1.0 / spec["rate"], [], time.perf_counter()
    while next_at < stop_at:
        await asyncio.sleep(max(next_at - time.perf_counter(), 0))
        tasks.append(asyncio.create_task(_one(session, spec["url"], body, spec["stream"], out)))
        next_at += interval
    await asyncio.gather(*tasks)


async def run(spec: dict) -> dict:
    """Drive the load described by ``spec``; returns the measurements."""
    out = {"latencies_ms": [], "errors": 0, "chunks": 0, "recording": False}
    body = _body(spec.get("model", "bench"), spec["stream"])
    drive = _closed if spec["mode"] == "closed" else _open
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        warm_until = time.perf_counter() + spec["warmup_s"]
        await drive(spec, session, body, out, warm_until)
        out["recording"], out["chunks"] = True, 0
        start = time.perf_counter()
        await drive(spec, session, body, out, start + spec["duration_s"])
        out["duration_s"] = time.perf_counter() - start
    del out["recording"]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[1])))))
