"""Load generator for overhead benchmarks, run as its own process (pinned to its own core).

``python bench/lib/loadgen.py SPEC_JSON`` prints one JSON line: ``latencies_ms`` (one per
completed request, end of answer for streams), ``gate_ms`` (the gate's time each answer's
``server-timing`` header reported, when it had one), ``errors``, ``chunks`` (SSE events
received), ``duration_s``, and ``served``/``chunks_all`` (warm-up included). SPEC keys:
``url``, ``model``, ``stream``, ``mode`` (``closed``: ``clients`` back-to-back; ``open``:
``rate`` requests/s at fixed intervals), ``duration_s``, ``warmup_s``, and optional ``headers``
(added to every request), ``think_ms`` (closed loop: each client's think time, an idle
``asyncio.sleep`` before each request, not counted in its latency), ``stamps`` (when true,
``ends``: ``[wall-clock time.time() s, ok]`` of every recorded request as it ended) and
``api`` (the body's shape: ``chat``, the default; ``messages``, Anthropic's; ``responses``,
OpenAI Responses, with ``store`` as the spec's ``store``, default false).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Iterator

import aiohttp

_GATE_MS = re.compile(r"\bgate;dur=([0-9.]+)")
"""The gate's time (ms) in llmroute's ``server-timing`` header (``flow/headers.py``)."""


def new_nonce() -> str:
    """A random nonce of 8 decimal digits. Digits, not hex: letters in a nonce change which
    character n-grams the gate sees, so some nonces would skip its encoder (~15 % of hex ones
    did) and the gate-on figure would depend on the draw."""
    return f"{int.from_bytes(os.urandom(4), 'big') % 10**8:08d}"


def prompt(nonce: str, i: int) -> str:
    """The ``i``-th prompt of a load generator whose nonce is ``nonce`` (``new_nonce``)."""
    return f"Say hello to the benchmark. #{nonce}-{i}"


def bodies(model: str, stream: bool, api: str = "chat", store: bool = False
            ) -> Iterator[bytes]:
    """Request bodies of the ``api``'s shape (the same prompt and output budget in each),
    each with a distinct prompt so no cache on the path can answer — also across runs: every
    load generator process numbers its prompts after its own nonce."""
    nonce = new_nonce()
    for i in itertools.count():
        text = prompt(nonce, i)
        if api == "responses":
            body = {"model": model, "stream": stream, "max_output_tokens": 32,
                    "store": store, "input": text}
        else:
            body = {"model": model, "stream": stream, "max_tokens": 32,
                    "messages": [{"role": "user", "content": text}]}
        yield json.dumps(body).encode()


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool,
               out: dict) -> None:
    """One request; records its latency (ms) or an error while ``out["recording"]``, and
    counts it in ``out["served"]`` in either phase (the proxy's CPU covers both)."""
    start = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=out["headers"]) as resp:
            if stream:
                async for line in resp.content:
                    out["chunks"] += line.startswith(b"data: ")
            else:
                await resp.read()
            ok = resp.status == 200
            gate = _GATE_MS.search(resp.headers.get("server-timing", ""))
    except aiohttp.ClientError:
        ok, gate = False, None
    out["served"] += 1
    if out["recording"] and out["ends"] is not None:
        out["ends"].append([time.time(), ok])
    if out["recording"]:
        if ok:
            out["latencies_ms"].append((time.perf_counter() - start) * 1000)
            if gate:
                out["gate_ms"].append(float(gate.group(1)))
        else:
            out["errors"] += 1


async def _closed(spec: dict, session: aiohttp.ClientSession, bodies: Iterator[bytes],
                  out: dict, stop_at: float) -> None:
    think_s = spec.get("think_ms", 0.0) / 1000

    async def client() -> None:
        while time.perf_counter() < stop_at:
            if think_s:
                await asyncio.sleep(think_s)
            await _one(session, spec["url"], next(bodies), spec["stream"], out)
    await asyncio.gather(*(client() for _ in range(spec["clients"])))


async def _open(spec: dict, session: aiohttp.ClientSession, bodies: Iterator[bytes],
                out: dict, stop_at: float) -> None:
    interval, tasks, next_at = 1.0 / spec["rate"], [], time.perf_counter()
    while next_at < stop_at:
        await asyncio.sleep(max(next_at - time.perf_counter(), 0))
        tasks.append(asyncio.create_task(
            _one(session, spec["url"], next(bodies), spec["stream"], out)))
        next_at += interval
    await asyncio.gather(*tasks)


async def run(spec: dict) -> dict:
    """Drive the load described by ``spec``; returns the measurements."""
    out = {"latencies_ms": [], "gate_ms": [], "errors": 0, "chunks": 0, "served": 0,
           "recording": False, "ends": [] if spec.get("stamps") else None,
           "headers": {"content-type": "application/json",
                       "authorization": f"Bearer {spec.get('key', 'none')}",
                       **spec.get("headers", {})}}
    texts = bodies(spec.get("model", "bench"), spec["stream"], spec.get("api", "chat"),
                   spec.get("store", False))
    drive = _closed if spec["mode"] == "closed" else _open
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        warm_until = time.perf_counter() + spec["warmup_s"]
        await drive(spec, session, texts, out, warm_until)
        out["recording"], out["chunks_all"], out["chunks"] = True, out["chunks"], 0
        start = time.perf_counter()
        await drive(spec, session, texts, out, start + spec["duration_s"])
        out["duration_s"] = time.perf_counter() - start
        out["chunks_all"] += out["chunks"]
    del out["recording"], out["headers"]
    if out["ends"] is None:
        del out["ends"]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[1])))))
