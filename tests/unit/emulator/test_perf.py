"""The performance model: invariants (Hypothesis) and the datasheet-derived capacities."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.emulator.hardware import GB, gpu_profile, model_size
from llmroute.emulator.perf import PerfModel
from llmroute.emulator.scheduler import Sequence
from llmroute.emulator.spec import EngineSpec

PAIRS = [("a100-80g", "7b"), ("h100", "13b"), ("l4", "1b"), ("t4", "1b"), ("l4", "7b")]
pairs = st.sampled_from(PAIRS)


def idle_ttft(profile: str, size: str, prompt: int) -> float:
    """Model seconds to the first token of a lone request, through the real scheduler."""
    sched = EngineSpec(profile, size).scheduler()
    assert sched.add(Sequence("a", prompt, 1, 0.0)) is None
    now = 0.0
    while True:
        batch = sched.schedule(now)
        assert batch is not None
        now = batch.end
        if any(e.first for e in sched.complete(batch)):
            return now


@given(pairs, st.integers(1, 12_000), st.integers(1, 12_000))
def test_ttft_grows_with_prompt_length(pair: tuple[str, str], a: int, b: int) -> None:
    short, long = sorted((a, b))
    assert idle_ttft(*pair, short) <= idle_ttft(*pair, long)


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_long_prompts_are_compute_bound_and_cost_more(pair: tuple[str, str]) -> None:
    assert idle_ttft(*pair, 8000) > 4 * idle_ttft(*pair, 500)


@given(pairs, st.integers(1, 255), st.integers(1, 8000))
def test_decode_step_time_grows_with_batch(pair: tuple[str, str], batch: int, ctx: int) -> None:
    perf = EngineSpec(*pair).perf()
    assert perf.decode_step_time(batch + 1, ctx) > perf.decode_step_time(batch, ctx)


@given(pairs, st.integers(1, 64), st.integers(1, 8000), st.integers(1, 8000))
def test_decode_step_time_grows_with_context(pair: tuple[str, str], batch: int, a: int,
                                             b: int) -> None:
    perf = EngineSpec(*pair).perf()
    lo, hi = sorted((a, b))
    assert perf.decode_step_time(batch, lo) <= perf.decode_step_time(batch, hi)


def test_kv_capacity_from_datasheet_memory() -> None:
    # 80 GB × 0.9 − 1.5 GB reserve − 6,738,415,616 × 2 B of weights, / 524,288 B per token
    perf = PerfModel(gpu_profile("a100-80g"), model_size("7b"))
    expected = (int(80 * GB * 0.9 - 1.5 * GB) - 6_738_415_616 * 2) // 524_288 // 16 * 16
    assert perf.kv_capacity_tokens() == expected


def test_batch_one_decode_is_bandwidth_bound() -> None:
    # 7B on an A100: 13.5 GB of weights over 2,039 GB/s × 0.7, plus 3 ms overhead ≈ 12.4 ms
    perf = PerfModel(gpu_profile("a100-80g"), model_size("7b"))
    assert perf.decode_step_time(1, 1) == pytest.approx(
        6_738_415_616 * 2 / (2039e9 * 0.7) + 0.003, rel=1e-3)


FASTER = [("h100", "a100-80g", "13b"), ("a100-80g", "l4", "1b"), ("l4", "t4", "1b")]


@pytest.mark.parametrize("fast,slow,size", FASTER, ids=[f"{a}>{b}" for a, b, _ in FASTER])
def test_faster_gpu_prefills_faster(fast: str, slow: str, size: str) -> None:
    assert idle_ttft(fast, size, 2000) < idle_ttft(slow, size, 2000)


@pytest.mark.parametrize("profile,size,gpus", [("t4", "7b", 1), ("h100", "70b", 1)],
                         ids=["7b-on-t4", "70b-on-one-h100"])
def test_model_that_does_not_fit_is_refused(profile: str, size: str, gpus: int) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        EngineSpec(profile, size, gpus).scheduler_config()


def test_tensor_parallel_makes_70b_fit() -> None:
    assert EngineSpec("h100", "70b", gpus=2).scheduler_config().total_blocks > 0


@pytest.mark.parametrize("name", ["b200", ""], ids=["unknown", "empty"])
def test_unknown_profile_names_the_known_ones(name: str) -> None:
    with pytest.raises(ValueError, match="a100-80g"):
        EngineSpec(name).perf()
