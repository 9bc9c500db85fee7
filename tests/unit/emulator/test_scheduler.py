"""The continuous-batching scheduler: KV accounting, preemption, admission, completion."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.emulator.hardware import gpu_profile, model_size
from llmroute.emulator.perf import PerfModel
from llmroute.emulator.scheduler import Scheduler, SchedulerConfig, Sequence, TokenEvent

PERF = PerfModel(gpu_profile("a100-80g"), model_size("7b"))


def small(blocks: int = 8, **kw: int | None) -> Scheduler:
    """A tiny cache (``blocks`` × 16 tokens) so pressure is easy to create."""
    cfg = SchedulerConfig(total_blocks=blocks, max_model_len=blocks * 16, **kw)  # type: ignore[arg-type]
    return Scheduler(cfg, PERF)


def drain(sched: Scheduler, now: float = 0.0, check: bool = True) -> list[TokenEvent]:
    events: list[TokenEvent] = []
    while (batch := sched.schedule(now)) is not None:
        if check:
            assert sched.used_blocks <= sched.config.total_blocks
        now = batch.end
        events += sched.complete(batch)
    return events


requests = st.lists(st.tuples(st.integers(1, 100), st.integers(1, 28)), min_size=1,
                    max_size=30)


@settings(max_examples=60, deadline=None)
@given(requests, st.integers(1, 4), st.integers(8, 128))
def test_kv_never_exceeds_capacity_and_every_request_finishes(
        reqs: list[tuple[int, int]], seqs: int, budget: int) -> None:
    sched = small(blocks=8, max_num_seqs=seqs, max_batched_tokens=budget)
    for i, (prompt, out) in enumerate(reqs):
        assert sched.add(Sequence(f"r{i}", prompt, out, 0.0)) is None
    events = drain(sched)
    finished = {e.seq_id: e.generated for e in events if e.finished}
    assert finished == {f"r{i}": out for i, (_, out) in enumerate(reqs)}
    assert sched.used_blocks == 0 and sched.idle()


def test_pressure_preempts_the_latest_admitted_and_recomputes_it() -> None:
    sched = small(blocks=4, max_batched_tokens=256)
    sched.add(Sequence("old", 30, 30, 0.0))  # 2 blocks now, 4 blocks (60 tokens) at the end
    sched.add(Sequence("new", 30, 20, 0.0))  # the 3rd block of either one does not fit
    events = drain(sched)
    assert sched.preemptions >= 1
    assert [e.seq_id for e in events if e.finished] == ["old", "new"]
    new_counts = [e.generated for e in events if e.seq_id == "new"]
    assert new_counts == list(range(1, 21))  # recompute keeps the tokens already generated


def test_ttft_of_a_queued_request_includes_the_wait() -> None:
    sched = small(blocks=64, max_num_seqs=1)
    sched.add(Sequence("a", 100, 50, 0.0))
    sched.add(Sequence("b", 100, 1, 0.0))
    first = {e.seq_id: e.at for e in drain(sched) if e.first}
    assert first["b"] > first["a"] + 49 * PERF.decode_step_time(1, 100)


REJECT = [
    ("too-long", {"blocks": 8}, (100, 100), 400, "context_length_exceeded"),
    ("queue-full", {"blocks": 64, "max_waiting": 0}, (10, 10), 503, "engine_overloaded"),
]


@pytest.mark.parametrize("kw,req,status,code", [r[1:] for r in REJECT], ids=[r[0] for r in REJECT])
def test_requests_that_cannot_run_are_rejected(kw: dict, req: tuple[int, int], status: int,
                                               code: str) -> None:
    sched = small(**kw)
    rejection = sched.add(Sequence("x", *req, 0.0))
    assert rejection is not None and (rejection.status, rejection.code) == (status, code)
    assert sched.idle()


def test_abort_frees_blocks() -> None:
    sched = small(blocks=16)
    sched.add(Sequence("a", 100, 10, 0.0))
    batch = sched.schedule(0.0)
    assert batch is not None and sched.used_blocks == 7
    sched.complete(batch)
    assert sched.abort("a") and sched.used_blocks == 0 and sched.idle()
    assert not sched.abort("a")


def test_chunked_prefill_shares_the_step_budget() -> None:
    sched = small(blocks=64, max_batched_tokens=64)
    sched.add(Sequence("a", 200, 1, 0.0))
    batch = sched.schedule(0.0)
    assert batch is not None and [n for _, n in batch.entries] == [64]


def test_abort_during_a_step_skips_the_sequence() -> None:
    sched = small(blocks=16)
    sched.add(Sequence("a", 10, 1, 0.0))
    sched.add(Sequence("b", 10, 1, 0.0))
    batch = sched.schedule(0.0)
    assert batch is not None
    assert sched.abort("a")
    events = sched.complete(batch)
    assert [e.seq_id for e in events] == ["b"] and events[0].finished
    assert sched.idle() and sched.used_blocks == 0
