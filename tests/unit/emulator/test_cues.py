"""Misbehaviour on cue, seen from the router's side of the wire: degraded answers are flat
(the fuse's entropy bound jumps) and some are cut short; a GPU whose cooling fails heats
past 78 °C under load and its DCGM page says so; a link that slows shows in the router's
own poll timings."""

from __future__ import annotations

import statistics
from dataclasses import replace

import aiohttp
import orjson
import httpx
import pytest

from llmroute.anchor.sources.dcgm import parse_dcgm
from llmroute.anchor.sources.http import PromSource
from llmroute.anchor.sources.vllm import parse_vllm_metrics
from llmroute.emulator.cues import Cues, Link
from llmroute.emulator.fleet import serve_engines
from llmroute.emulator.gpu import GpuState
from llmroute.emulator.scheduler import Batch
from llmroute.emulator.spec import EngineSpec
from llmroute.fuse.entropy import chunk_entropies
from llmroute.types import Backend

FAST = EngineSpec("a100-80g", "7b", time_scale=0.01, stream_interval=4)


def body(**kw: object) -> dict[str, object]:
    return {"model": FAST.model_name, "messages": [{"role": "user", "content": "hi " * 50}],
            "max_tokens": 40, **kw}


async def mean_entropy(spec: EngineSpec) -> float:
    async with serve_engines([spec]) as (served,), \
            httpx.AsyncClient(base_url=served.base_url, timeout=30) as client:
        answer = (await client.post("/v1/chat/completions", json=body(
            logprobs=True, top_logprobs=5))).json()
    chunk = {"choices": [{"logprobs": answer["choices"][0]["logprobs"]}]}
    return statistics.fmean(chunk_entropies(chunk))


async def test_degraded_answers_are_flat_from_the_cue_on():
    healthy = await mean_entropy(FAST)
    degraded = await mean_entropy(replace(FAST, cues=Cues(degrade_at_s=0.0, truncate_share=0)))
    assert healthy < 1.0 and degraded > 3.2  # over the fuse's 3.2-nat default


async def test_degraded_answers_are_cut_short_but_say_length():
    spec = replace(FAST, cues=Cues(degrade_at_s=0.0, truncate_share=1.0))
    async with serve_engines([spec]) as (served,), \
            httpx.AsyncClient(base_url=served.base_url, timeout=30) as client:
        got = [(await client.post("/v1/chat/completions", json=body())).json()
               for _ in range(5)]
    assert all(g["choices"][0]["finish_reason"] == "length" for g in got)
    assert all(4 <= g["usage"]["completion_tokens"] <= 20 for g in got)


def busy(gpu: GpuState, start: float, seconds: float) -> None:
    """``seconds`` of back-to-back 50 ms steps from ``start``."""
    t = start
    while t < start + seconds:
        gpu.step(Batch((), t, 0.05))
        t += 0.05


@pytest.mark.parametrize("hot,low,high", [(None, 55.0, 60.0), (30.0, 80.0, 85.0)],
                         ids=["healthy", "hot"])
def test_a_busy_gpu_heats_towards_its_steady_temperature(hot, low, high):
    spec = replace(FAST, cues=Cues(hot_at_s=hot))
    sched = spec.scheduler()
    gpu = GpuState(sched.perf, sched, spec.cues)
    busy(gpu, 0.0, 30.0)
    assert gpu.temp_c < 62.0 and gpu.util > 0.99
    busy(gpu, 30.0, 150.0)
    assert low < gpu.temp_c <= high
    gpu.advance(400.0)  # idle a long while: back towards idle (plus the fault)
    assert gpu.temp_c < (41.0 if hot is None else 66.0) and gpu.util < 0.01


async def test_the_dcgm_page_reads_with_the_routers_parser():
    spec = replace(FAST, time_scale=1.0, cues=Cues(hot_at_s=0.0))  # model time ≈ wall time
    async with serve_engines([spec]) as (served,), \
            httpx.AsyncClient(base_url=served.base_url, timeout=30) as client:
        served.engine.gpu.temp_c = 80.5
        text = (await client.get("/dcgm/metrics")).text
    s = parse_dcgm(text, 0.0)
    assert s.rejected == () and 80.0 < s.gpu_temp_c < 81.0
    assert s.gpu_mem_used_bytes > 13e9 and s.gpu_util is not None
    assert s.gpu_mem_bw_util is not None


async def rtts(spec: EngineSpec, polls: int = 5) -> list[float]:
    async with serve_engines([spec]) as (served,), aiohttp.ClientSession() as session:
        source = PromSource(session, parse_vllm_metrics, 5.0)
        backend = Backend("e", "p", "emulator", served.base_url, FAST.model_name, 4096)
        return [(await source.poll(backend, 0.0)).net_rtt_ms for _ in range(polls)]


async def test_a_slow_link_shows_in_the_routers_poll_timings():
    link = Link(rtt_s=2.0, bytes_per_s=2e6)  # model units: × 0.01 on the wall clock
    fast = await rtts(replace(FAST, cues=Cues(link=link)))
    slow = await rtts(replace(FAST, cues=Cues(link=link, slow_link_at_s=0.0)))
    assert 20.0 <= statistics.median(fast) < 60.0  # 20 ms round trip on the wall clock
    assert statistics.median(slow) >= 100.0  # five times that


async def test_a_slow_consumer_still_gets_every_token_and_the_finish():
    spec = replace(FAST, stream_interval=16, cues=Cues(link=Link(rtt_s=0.5, bytes_per_s=2e5)))
    async with serve_engines([spec]) as (served,), \
            httpx.AsyncClient(base_url=served.base_url, timeout=60) as client:
        for _ in range(3):
            async with client.stream("POST", "/v1/chat/completions",
                                     json=body(stream=True, max_tokens=50, logprobs=True,
                                               top_logprobs=5)) as resp:
                chunks = [orjson.loads(x[6:]) async for x in resp.aiter_lines()
                          if x.startswith("data: {")]
            tokens = sum(len(c["choices"][0]["logprobs"]["content"]) for c in chunks)
            assert tokens == 50 and chunks[-1]["choices"][0]["finish_reason"] == "length"
