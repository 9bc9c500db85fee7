"""Saturation throughput from the offline scheduler (the benchmark's capacity figure)."""

from __future__ import annotations

import pytest

from llmroute.emulator.capacity import fits, saturation_throughput
from llmroute.emulator.spec import EngineSpec

MIX = [(1000 + 37 * i % 3000, 20 + 13 * i % 200) for i in range(120)]


def test_a_faster_gpu_serves_more_requests_per_second() -> None:
    h100 = saturation_throughput(EngineSpec("h100", "13b"), MIX)
    a100 = saturation_throughput(EngineSpec("a100-80g", "13b"), MIX)
    assert h100 > 1.5 * a100 > 0


def test_a_smaller_model_serves_more_requests_per_second() -> None:
    small = saturation_throughput(EngineSpec("a100-80g", "7b"), MIX)
    large = saturation_throughput(EngineSpec("a100-80g", "13b"), MIX)
    assert small > large


def test_prefill_bound_capacity_is_below_the_flops_bound() -> None:
    spec = EngineSpec("a100-80g", "7b")
    perf = spec.perf()
    flops_per_request = sum(perf.chunk_flops(0, p) + o * perf.token_flops(p)
                            for p, o in MIX) / len(MIX)
    bound = perf.gpu.flops * perf.compute_efficiency / flops_per_request
    assert saturation_throughput(spec, MIX) <= bound


def test_requests_that_do_not_fit_are_left_out() -> None:
    spec = EngineSpec("l4", "7b")  # ~12.6k tokens of KV cache
    assert not fits(spec, 20_000, 10)
    assert saturation_throughput(spec, MIX + [(20_000, 10)] * 50) > 0


def test_a_mix_that_does_not_fit_is_an_error() -> None:
    with pytest.raises(ValueError, match="fit"):
        saturation_throughput(EngineSpec("l4", "7b"), [(20_000, 10)] * 20)
