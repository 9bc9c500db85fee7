"""The step loop in scaled real time: model timings stay exact whatever the time scale."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmroute.emulator.engine import EmulatedEngine, Handle, running
from llmroute.emulator.spec import EngineSpec


def ttft_sum(engine: EmulatedEngine) -> float:
    for family in text_string_to_metric_families(engine.metrics.render().decode()):
        for s in family.samples:
            if s.name == "vllm:time_to_first_token_seconds_sum":
                return s.value
    raise AssertionError("no TTFT histogram")


@pytest.mark.parametrize("scale", [0.01, 0.05], ids=["x100", "x20"])
async def test_model_ttft_does_not_depend_on_the_time_scale(scale: float) -> None:
    spec = EngineSpec("l4", "8b", time_scale=scale)
    engine = EmulatedEngine(spec)
    async with running(engine):
        handle = engine.submit(4000, 2)
        assert isinstance(handle, Handle)
        async for _ in handle.updates():
            pass
    expected = spec.perf().prefill_time(4000, spec.max_batched_tokens)
    assert ttft_sum(engine) == pytest.approx(expected, rel=1e-6)


async def test_wall_time_follows_the_scale() -> None:
    spec = EngineSpec("l4", "8b", time_scale=0.1)
    engine = EmulatedEngine(spec)
    model_s = spec.perf().prefill_time(8000, spec.max_batched_tokens)  # ≈ 2.3 model s
    async with running(engine):
        start = time.monotonic()
        handle = engine.submit(8000, 1)
        assert isinstance(handle, Handle)
        async for _ in handle.updates():
            pass
        wall = time.monotonic() - start
    assert 0.1 * model_s <= wall < 0.1 * model_s + 0.15


async def test_concurrent_requests_share_steps() -> None:
    engine = EmulatedEngine(EngineSpec("h100", "7b", time_scale=0.01))
    async with running(engine):
        handles = [engine.submit(200, 50) for _ in range(20)]

        async def finish(h: Handle | object) -> int:
            assert isinstance(h, Handle)
            async for _ in h.updates():
                pass
            return h.generated

        assert await asyncio.gather(*(finish(h) for h in handles)) == [50] * 20
    assert engine.scheduler.idle() and engine.scheduler.used_blocks == 0


async def test_alive_only_while_the_step_loop_runs() -> None:
    engine = EmulatedEngine(EngineSpec(time_scale=0.01))
    assert not engine.alive()
    async with running(engine):
        assert engine.alive()
    assert not engine.alive()
