"""Signal store and collector: freshness, back-off, state-change logging, and real HTTP
polls against a scripted metrics endpoint on loopback (garbage, slow, 500, 404 /slots)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from fakes.anchor_ctx import signals
from fakes.clock import FakeClock
from fakes.http import serve_app
from structlog.testing import capture_logs

from llmroute.anchor.collector import Collector, next_delay
from llmroute.anchor.sources.gpu import WithGpu
from llmroute.anchor.sources.http import LlamaCppSource, source_for
from llmroute.anchor.sources.nvml import NvmlSource
from llmroute.anchor.store import SignalStore
from llmroute.errors import SignalSourceError
from llmroute.types import Backend

ENGINE_DATA = Path(__file__).resolve().parents[2] / "data" / "engine"
VLLM_OK = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 5.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.5
"""


@pytest.mark.parametrize("failures,expected", [(0, 0.2), (1, 0.2), (2, 0.4), (3, 0.8),
                                               (6, 6.4), (7, 10.0), (500, 10.0)],
                         ids=["ok", "first-failure", "2", "3", "6", "capped", "huge"])
def test_back_off(failures, expected):
    assert next_delay(0.2, failures, 10.0) == pytest.approx(expected)


def test_store_freshness_and_failures():
    store = SignalStore(stale_after_s=2.0)
    store.record_ok("a", signals(waiting=1), now=0.0)
    assert store.fresh(1.5) == {"a": signals(waiting=1)}
    assert store.fresh(2.5) == {}
    store.record_failure("a", "boom", now=3.0)
    e = store.entry("a")
    assert (e.state, e.failures, e.error) == ("down", 1, "boom")
    assert e.signals == signals(waiting=1)  # kept for /debug/backends, but stale
    assert store.age("a", 3.0) == 3.0 and not store.is_fresh("a", 3.0)
    assert store.entry("never").state == "unknown"


class Scripted:
    """A source whose polls follow ``steps``: a signals object, an exception, or a delay."""

    def __init__(self, steps):
        self.steps = list(steps)

    async def poll(self, backend, now):
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, Exception):
            raise step
        if isinstance(step, float):
            await asyncio.sleep(step)
        return signals(waiting=1)


BACKEND = Backend("a", "p", "vllm", "http://unused", "m", 4096)


async def test_collector_logs_only_on_state_change_and_survives_a_hang():
    boom = SignalSourceError("refused")
    source = Scripted([signals(), signals(), boom, boom, 5.0, signals()])
    store = SignalStore(2.0)
    c = Collector({"a": (BACKEND, source)}, store, clock=lambda: 1.0, timeout_s=0.05)
    with capture_logs() as logs:
        results = [await c.poll_once("a") for _ in range(6)]
    assert results == [True, True, False, False, False, True]
    assert [(e["event"], e["state"]) for e in logs if e["event"] == "signals_state"] == [
        ("signals_state", "up"), ("signals_state", "down"), ("signals_state", "up")]
    assert store.entry("a").failures == 0


async def test_collector_loop_backs_off_after_failures():
    delays: list[float] = []

    async def sleep(s: float) -> None:
        delays.append(s)
        if len(delays) >= 4:
            raise asyncio.CancelledError

    source = Scripted([SignalSourceError("x")] * 3 + [signals()])
    c = Collector({"a": (BACKEND, source)}, SignalStore(2.0), clock=lambda: 0.0,
                  period_s=0.1, max_backoff_s=1.0, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await c.run("a")
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.1])


@contextlib.asynccontextmanager
async def serve(routes: dict[str, web.StreamResponse | str | float | int]
                ) -> AsyncIterator[str]:
    """A loopback server answering each path with text, a status code, or a delay (s)."""
    async def handle(request: web.Request) -> web.StreamResponse:
        step = routes.get(request.path, 404)
        if isinstance(step, float):
            await asyncio.sleep(step)
            return web.Response(text="late")
        if isinstance(step, int):
            return web.Response(status=step, text="nope")
        return web.Response(text=step)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    async with serve_app(app) as url:
        yield url


async def test_emulator_and_vllm_metrics_over_http():
    async with serve({"/metrics": VLLM_OK}) as url, aiohttp.ClientSession() as session:
        source = source_for("emulator", session, 1.0)
        got = await source.poll(Backend("e", "p", "emulator", url, "m", 4096), 7.0)
    assert (got.running, got.waiting, got.kv_cache_usage, got.taken_at) == (2, 5, 0.5, 7.0)


@pytest.mark.parametrize("routes,raises,missing_running", [
    ({"/metrics": "garbage {{{ not prometheus\n"}, False, True),
    ({"/metrics": 500}, True, None),
    ({"/metrics": 2.0}, True, None),
    ({}, True, None),
], ids=["garbage", "http-500", "slow-30s-like", "no-endpoint"])
async def test_bad_endpoints_never_raise_anything_but_source_errors(routes, raises,
                                                                   missing_running):
    async with serve(routes) as url, aiohttp.ClientSession() as session:
        source = source_for("vllm", session, 0.3)
        backend = Backend("v", "p", "vllm", url, "m", 4096)
        if raises:
            with pytest.raises(SignalSourceError):
                await source.poll(backend, 0.0)
        else:
            got = await source.poll(backend, 0.0)
            assert got.running is None and "running" in got.missing


async def test_llamacpp_real_capture_with_slots_404():
    metrics = (ENGINE_DATA / "llamacpp-local-metrics-busy.txt").read_text()
    async with serve({"/metrics": metrics}) as url, aiohttp.ClientSession() as session:
        got = await LlamaCppSource(session, 1.0).poll(
            Backend("l", "p", "llamacpp", url, "m", 4096), 0.0)
    assert got.running is not None
    assert got.idle_slots is None and "idle_slots" in got.missing


async def test_absent_gpu_is_an_absent_signal_not_an_error():
    async with serve({"/metrics": VLLM_OK}) as url, aiohttp.ClientSession() as session:
        source = WithGpu(source_for("vllm", session, 1.0), NvmlSource(0))
        got = await source.poll(Backend("v", "p", "vllm", url, "m", 4096), 0.0)
    assert got.waiting == 5
    if got.gpu_mem_free_bytes is None:  # this machine has no NVIDIA GPU
        assert {"gpu_mem_free_bytes", "gpu_util"} <= set(got.missing)


async def test_collector_start_stop_polls_a_real_endpoint():
    async with serve({"/metrics": VLLM_OK}) as url, aiohttp.ClientSession() as session:
        backend = Backend("v", "p", "vllm", url, "m", 4096)
        store = SignalStore(2.0)
        loop = asyncio.get_running_loop()
        c = Collector({"v": (backend, source_for("vllm", session, 1.0))}, store, loop.time,
                      period_s=0.02)
        c.start()
        await asyncio.sleep(0.2)
        first = store.entry("v").signals.taken_at
        await asyncio.sleep(0.1)
        await c.stop()
    assert store.entry("v").signals.taken_at > first
    assert store.fresh(loop.time())["v"].waiting == 5


async def test_stop_ends_the_loops_even_when_a_source_swallows_the_cancellation():
    class Stubborn:
        swallowed = 0

        async def poll(self, backend, now):
            try:
                await asyncio.Event().wait()  # an answer still on its way
            except asyncio.CancelledError:
                self.swallowed += 1  # a misbehaving client library
            return signals(waiting=1)

    clock = FakeClock()
    source = Stubborn()
    c = Collector({"a": (BACKEND, source)}, SignalStore(2.0), clock, period_s=0.01,
                  sleep=clock.sleep)
    c.start()
    await asyncio.sleep(0)  # the loop starts and waits inside its first poll
    await asyncio.wait_for(c.stop(), 2.0)
    assert source.swallowed == 1
