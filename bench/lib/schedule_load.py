"""Helpers of ``bench/schedule.py`` that run in their own processes: the emulated fleet and
the load generator (so neither competes with the router's event loop), plus the trace. Both
processes are started once and serve one run after another (a fresh fleet and a fresh load
per run), so a goodput sweep of many short runs does not pay a process start per run.

Trace: ``../shared/data/azure-llm-trace-2023`` (Patel et al., "Splitwise", ISCA 2024; CC BY
4.0): the code and conversation services, merged by arrival time. Each row gives arrival
time, prompt tokens and output tokens; prompts are synthesised as text the router's token
estimate counts as exactly that many tokens, and the output length is sent as
``max_tokens`` (the emulator always generates all of them, like ``ignore_eos``).
"""

from __future__ import annotations

import asyncio
import csv
import math
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from prometheus_client.parser import text_string_to_metric_families

from llmroute.anchor.sources.vllm import parse_vllm_metrics
from llmroute.text import MESSAGE_OVERHEAD_TOKENS

TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "azure-llm-trace-2023"
FILES = {"code": "AzureLLMInferenceTrace_code.csv", "conv": "AzureLLMInferenceTrace_conv.csv"}


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of the trace: ``t`` seconds since the trace start, token counts, kind."""

    t: float
    prompt_tokens: int
    output_tokens: int
    kind: str


def load_trace(root: Path = TRACE) -> list[TraceRow]:
    """Both services' requests sorted by arrival. Raises FileNotFoundError when absent."""
    rows = []
    for kind, name in FILES.items():
        with (root / name).open(newline="") as f:
            for r in csv.DictReader(f):
                at = datetime.fromisoformat(r["TIMESTAMP"][:26]).timestamp()
                rows.append((at, int(r["ContextTokens"]), int(r["GeneratedTokens"]), kind))
    rows.sort()
    t0 = rows[0][0]
    return [TraceRow(at - t0, p, max(o, 1), k) for at, p, o, k in rows]


def prompt_text(tokens: int, index: int = 0) -> str:
    """A user message the router (``text``: 3 characters per token, plus the
    per-message overhead) and the emulator count as ``tokens`` prompt tokens. It starts
    with ``index`` (9 digits), so no two requests of a run share a prefix the engines'
    prefix caches could reuse (the trace says nothing of shared prefixes)."""
    units = max(tokens - MESSAGE_OVERHEAD_TOKENS, 1)
    if units < 3:
        return "la " * units
    return f"{index:09d}" + "la " * (units - 3)


# ---------------------------------------------------------------- the emulated fleet process

def fleet_process(conn: Any) -> None:
    """Child process: for every list of engine specs received on ``conn`` (until None),
    serve them on free ports, send ``[(base_url, max_model_len, kv_events endpoint or
    None)]`` back and serve until anything arrives on ``conn``; then stop them."""
    while (specs := conn.recv()) is not None:
        asyncio.run(_fleet(specs, conn))


async def _fleet(specs: list[Any], conn: Any) -> None:
    from llmroute.emulator.fleet import serve_engines

    async with serve_engines(specs) as served:
        conn.send([(s.base_url, s.engine.scheduler.config.max_model_len, s.kv_events)
                   for s in served])
        await asyncio.to_thread(conn.recv)


# ---------------------------------------------------------------- the load generator process

@dataclass(frozen=True, slots=True)
class Outcome:
    """One request as the client saw it (wall seconds from its send time). ``status``:
    ``ok``; ``failed`` (an error, or a wrong answer); ``deadline`` (no first token within
    the TTFT deadline: the client gave up); ``unfinished`` (still streaming when the run
    ended; its TTFT is known, its end-to-end latency is not)."""

    index: int
    status: str
    ttft_s: float | None
    e2e_s: float
    backend: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class Poll:
    """One read of every engine's ``/metrics``: wall offset ``t`` (s) and, per engine, KV-cache
    usage (fraction 0–1), running and waiting requests, and its prefix cache's counters
    (tokens queried, tokens hit; 0 where not exported)."""

    t: float
    kv: list[float]
    running: list[int]
    waiting: list[int]
    queries: tuple[int, ...] = ()
    hits: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Busy:
    """Each engine's GPU-busy model seconds so far
    (``llmroute_emulator_gpu_busy_seconds_total``), read at wall offset ``t`` (s)."""

    t: float
    seconds: list[float]


@dataclass(frozen=True, slots=True)
class FirstTokens:
    """The engines' own TTFT histograms (``vllm:time_to_first_token_seconds``, model
    seconds, measured on the emulated clock from the request's arrival at the engine to its
    first token), summed over the fleet at the end of a run: ``within[le]`` requests whose
    first token came within ``le`` seconds, for each bucket bound; ``count`` requests that had
    a first token."""

    within: dict[float, int]
    count: int

    def share_within(self, bound: float, sent: int) -> float:
        """The share (0–1) of ``sent`` requests whose engine-side TTFT was ≤ ``bound`` (one
        of the histogram's bucket bounds); a request that never had a first token at an
        engine (refused, given up on, still queued) counts as over it. Raises KeyError when
        ``bound`` is not a bucket bound."""
        return self.within[bound] / max(sent, 1)


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """What the load generator sends: ``schedule`` rows ``(wall offset s, prompt tokens,
    max tokens)`` to ``router``; ``deadline_s`` wall seconds to the first token; the run
    ends ``deadline_s`` after the last send; ``engines`` are polled every ``poll_s``.
    ``prompts(index, tokens)`` gives each request's text (a picklable callable; None:
    ``prompt_text``)."""

    router: str
    schedule: list[tuple[float, int, int]]
    engines: list[str]
    deadline_s: float
    poll_s: float = 0.25
    prompts: Any = None


def load_process(conn: Any) -> None:
    """Child process: for every ``LoadPlan`` received on ``conn`` (until None), replay it as
    streamed chats and send ``(outcomes, polls, busy, first_tokens)`` back (``polls``: a
    ``Poll`` every ``poll_s``; ``busy``: the engines' busy counters read as the first request
    is sent and as the last one is — two reads, so parsing them costs the load generator
    nothing that would delay its requests; ``first_tokens``: the engines' TTFT histograms
    once the run has ended)."""
    while (plan := conn.recv()) is not None:
        conn.send(asyncio.run(_load(plan)))


async def _load(plan: LoadPlan
                ) -> tuple[list[Outcome], list[Poll], list[Busy], FirstTokens]:
    # One connection per request: reusing keep-alive connections races with the server
    # closing idle ones, which would show up as client errors that no policy caused.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.monotonic()
        polls: list[Poll] = []
        busy = [await _busy(session, plan.engines, 0.0)]
        outcomes = await replay(session, plan, start, _watch(session, plan, start, polls, busy))
        first = first_tokens(await asyncio.gather(
            *(_get(session, e + "/metrics") for e in plan.engines)))
    return outcomes, polls, busy, first


async def _watch(session: aiohttp.ClientSession, plan: LoadPlan, start: float,
                 polls: list[Poll], busy: list[Busy]) -> None:
    """What runs beside a replay: the polls, and the busy counters' read at the last send."""
    await asyncio.gather(_poll(session, plan, start, polls), _busy_at(session, plan, start, busy))


async def replay(session: aiohttp.ClientSession, plan: LoadPlan, start: float,
                 beside: Coroutine[Any, Any, None]) -> list[Outcome]:
    """Send ``plan``'s rows from the monotonic second ``start`` on, with ``beside`` running
    meanwhile (cancelled at the end); every row's Outcome, ``unfinished`` for those still
    streaming one deadline after the last send."""
    side = asyncio.create_task(beside)
    progress = [_Progress() for _ in plan.schedule]
    tasks = [asyncio.create_task(_send_at(session, plan, i, row, start, progress[i]))
             for i, row in enumerate(plan.schedule)]
    end = start + plan.schedule[-1][0] + plan.deadline_s + 1.0
    done, pending = await asyncio.wait(tasks, timeout=max(end - time.monotonic(), 0))
    for t in (*pending, side):
        t.cancel()
    await asyncio.gather(*pending, side, return_exceptions=True)
    return [t.result() if t in done else progress[i].unfinished(i)
            for i, t in enumerate(tasks)]


@dataclass
class _Progress:
    """What is known of a request still in flight when the run ends."""

    sent: float = 0.0
    ttft: float | None = None
    backend: str = ""

    def unfinished(self, index: int) -> Outcome:
        """The Outcome of a request cut off by the end of the run."""
        return Outcome(index, "unfinished", self.ttft, time.monotonic() - self.sent,
                       self.backend)


async def _send_at(session: aiohttp.ClientSession, plan: LoadPlan, index: int,
                   row: tuple[float, int, int], start: float, progress: _Progress) -> Outcome:
    at, prompt, out = row
    await asyncio.sleep(max(start + at - time.monotonic(), 0.0))
    text = (plan.prompts or prompt_text)(prompt, index)
    body = {"model": "fleet", "stream": True, "max_tokens": out, "ignore_eos": True,
            "messages": [{"role": "user", "content": text}]}
    progress.sent = time.monotonic()
    try:
        return await _stream(session, plan, index, body, progress, out)
    except TimeoutError:
        return Outcome(index, "deadline", None, time.monotonic() - progress.sent,
                       progress.backend)
    except aiohttp.ClientError as exc:
        return Outcome(index, "failed", None, time.monotonic() - progress.sent,
                       progress.backend, f"{type(exc).__name__}: {exc}"[:80])


async def _stream(session: aiohttp.ClientSession, plan: LoadPlan, index: int,
                  body: dict[str, Any], progress: _Progress, out: int) -> Outcome:
    finish, tokens = None, 0
    async with asyncio.timeout(plan.deadline_s) as first_token:
        async with session.post(plan.router + "/v1/chat/completions", json=body) as resp:
            progress.backend = resp.headers.get("x-llmroute-backend", "")
            if resp.status != 200:
                await resp.read()
                return _failed(index, progress, f"HTTP {resp.status}")
            async for line in resp.content:
                if not line.startswith(b"data: {"):
                    continue
                chunk = orjson.loads(line[6:])
                if "error" in chunk:
                    return _failed(index, progress, "in-band error")
                for choice in chunk.get("choices", ()):
                    text = (choice.get("delta") or {}).get("content")
                    if text and progress.ttft is None:
                        progress.ttft = time.monotonic() - progress.sent
                        first_token.reschedule(None)
                    tokens += len(text.split()) if text else 0
                    finish = choice.get("finish_reason") or finish
    ok = finish == "length" and tokens == out
    return Outcome(index, "ok" if ok else "failed", progress.ttft,
                   time.monotonic() - progress.sent, progress.backend,
                   "" if ok else f"finish={finish} tokens={tokens}/{out}")


def _failed(index: int, progress: _Progress, why: str) -> Outcome:
    return Outcome(index, "failed", progress.ttft, time.monotonic() - progress.sent,
                   progress.backend, why)


async def _poll(session: aiohttp.ClientSession, plan: LoadPlan, start: float,
                polls: list[Poll]) -> None:
    while True:
        texts = await asyncio.gather(*(_get(session, e + "/metrics") for e in plan.engines))
        now = time.monotonic()
        signals = [parse_vllm_metrics(t, now) if t else None for t in texts]
        if all(s is not None and s.kv_cache_usage is not None for s in signals):
            polls.append(Poll(now - start, [float(s.kv_cache_usage) for s in signals],
                              [s.running or 0 for s in signals],
                              [s.waiting or 0 for s in signals],
                              tuple(s.prefix_cache_queries_total or 0 for s in signals),
                              tuple(s.prefix_cache_hits_total or 0 for s in signals)))
        await asyncio.sleep(plan.poll_s)


async def _busy_at(session: aiohttp.ClientSession, plan: LoadPlan, start: float,
                   out: list[Busy]) -> None:
    """Read the busy counters when the last request is sent (its offset)."""
    await asyncio.sleep(max(start + plan.schedule[-1][0] - time.monotonic(), 0.0))
    out.append(await _busy(session, plan.engines, time.monotonic() - start))


async def _busy(session: aiohttp.ClientSession, engines: list[str], t: float) -> Busy:
    """Every engine's busy counter at wall offset ``t`` (NaN where it cannot be read)."""
    texts = await asyncio.gather(*(_get(session, e + "/metrics") for e in engines))
    return Busy(t, [gpu_busy_s(text) for text in texts])


def gpu_busy_s(text: str) -> float:
    """The emulated GPU's busy model seconds so far in one ``/metrics`` body; NaN when
    absent."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "llmroute_emulator_gpu_busy_seconds_total":
                return sample.value
    return math.nan


def first_tokens(texts: list[str]) -> FirstTokens:
    """The fleet's TTFT histogram: ``vllm:time_to_first_token_seconds`` buckets summed over
    the engines' ``/metrics`` bodies (an unreadable body adds nothing)."""
    within: dict[float, int] = {}
    count = 0
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name != "vllm:time_to_first_token_seconds":
                continue
            for sample in family.samples:
                if sample.name.endswith("_bucket") and sample.labels["le"] != "+Inf":
                    le = float(sample.labels["le"])
                    within[le] = within.get(le, 0) + int(sample.value)
                elif sample.name.endswith("_count"):
                    count += int(sample.value)
    return FirstTokens(within, count)


async def _get(session: aiohttp.ClientSession, url: str) -> str:
    try:
        async with session.get(url) as resp:
            return await resp.text()
    except aiohttp.ClientError:
        return ""
