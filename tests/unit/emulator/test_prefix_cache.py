"""The emulated prefix cache: reuse of the longest cached prefix, reference counts, LRU
eviction of free cached blocks under KV pressure, the events and the counters."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.blocks import block_hashes
from llmroute.emulator.hardware import gpu_profile, model_size
from llmroute.emulator.metrics import EngineMetrics
from llmroute.emulator.perf import PerfModel
from llmroute.emulator.scheduler import Scheduler, SchedulerConfig, Sequence, TokenEvent
from llmroute.kvevents import BlockRemoved, BlockStored

PERF = PerfModel(gpu_profile("a100-80g"), model_size("7b"))


def sched(blocks: int = 16, **kw: int | bool) -> Scheduler:
    cfg = SchedulerConfig(total_blocks=blocks, max_model_len=blocks * 16, **kw)  # type: ignore[arg-type]
    return Scheduler(cfg, PERF)


def run(s: Scheduler, now: float = 0.0) -> list[TokenEvent]:
    events: list[TokenEvent] = []
    while (batch := s.schedule(now)) is not None:
        assert s.used_blocks + s.cache.free_cached <= s.config.total_blocks  # type: ignore[union-attr]
        now = batch.end
        events += s.complete(batch)
    return events


def chain(*ids: int) -> tuple[int, ...]:
    """Block hashes of a prompt made of the text blocks ``ids`` (16-token blocks)."""
    return tuple(block_hashes("".join(f"{i:047d}|" for i in ids), 16))


def ttft(events: list[TokenEvent], seq_id: str) -> float:
    return next(e.at - e.arrival for e in events if e.seq_id == seq_id and e.first)


def test_a_cached_prefix_is_reused_and_only_the_rest_is_prefilled() -> None:
    s = sched(blocks=512)
    s.add(Sequence("a", 3200, 1, 0.0, hashes=chain(*range(200))))
    cold = run(s)
    s.add(Sequence("b", 3208, 1, 1.0, hashes=chain(*range(200))))
    warm = run(s, 1.0)
    cache = s.cache
    assert cache is not None
    assert (cache.queries, cache.hits) == (3200 + 3208, 3200)  # all 200 blocks of b cached
    assert ttft(warm, "b") < ttft(cold, "a") / 5
    assert s.used_blocks == 0 and cache.free_cached == 200


def test_a_fully_cached_prompt_still_computes_its_last_block() -> None:
    s = sched(blocks=64)
    s.add(Sequence("a", 160, 1, 0.0, hashes=chain(*range(10))))
    run(s)
    s.add(Sequence("again", 160, 1, 0.0, hashes=chain(*range(10))))
    run(s)
    assert s.cache is not None and s.cache.hits == 9 * 16


def test_only_the_shared_leading_blocks_hit() -> None:
    s = sched(blocks=64)
    s.add(Sequence("a", 80, 1, 0.0, hashes=chain(1, 2, 3, 4, 5)))
    run(s)
    s.add(Sequence("b", 80, 1, 0.0, hashes=chain(1, 2, 9, 4, 5)))  # differs at block 2
    run(s)
    assert s.cache is not None and s.cache.hits == 2 * 16


def test_under_pressure_the_least_recently_freed_blocks_are_evicted_tail_first() -> None:
    s = sched(blocks=8)
    s.add(Sequence("a", 64, 1, 0.0, hashes=chain(1, 2, 3, 4)))
    run(s)
    s.add(Sequence("b", 64, 1, 0.0, hashes=chain(5, 6, 7, 8)))
    run(s)
    assert s.cache is not None and s.cache.take_events()  # 8 blocks cached, 0 empty
    s.add(Sequence("c", 32, 1, 0.0, hashes=chain(9, 10)))
    run(s)
    removed = [e for e in s.cache.take_events() if isinstance(e, BlockRemoved)]
    a = chain(1, 2, 3, 4)
    assert [h for e in removed for h in e.block_hashes] == [a[3], a[2]]  # a's tail first
    s.add(Sequence("a2", 64, 1, 0.0, hashes=a))
    run(s)
    assert s.cache.hits == 2 * 16  # a's first two blocks survived


def test_stored_events_chain_to_their_parent() -> None:
    s = sched(blocks=64, max_batched_tokens=32)  # two blocks per step
    h = chain(1, 2, 3, 4)
    s.add(Sequence("a", 64, 1, 0.0, hashes=h))
    run(s)
    stored = [e for e in s.cache.take_events() if isinstance(e, BlockStored)]  # type: ignore[union-attr]
    assert [(e.block_hashes, e.parent_block_hash) for e in stored] == [
        ([h[0], h[1]], None), ([h[2], h[3]], h[1])]


def test_blocks_held_by_a_running_sequence_are_never_evicted() -> None:
    s = sched(blocks=8, max_batched_tokens=64)
    s.add(Sequence("long", 64, 60, 0.0, hashes=chain(1, 2, 3, 4)))
    s.add(Sequence("share", 64, 1, 0.0, hashes=chain(1, 2, 3, 4)))
    events = run(s)
    assert {e.seq_id for e in events if e.finished} == {"long", "share"}
    assert s.used_blocks == 0


def test_the_counters_reach_metrics() -> None:
    s = sched(blocks=64)
    metrics = EngineMetrics(s, "m")
    for name in ("a", "b"):
        s.add(Sequence(name, 80, 1, 0.0, hashes=chain(1, 2, 3, 4, 5)))
        while (batch := s.schedule(0.0)) is not None:
            metrics.record(s.complete(batch), batch.duration)
    text = metrics.render().decode()
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 160.0' in text
    assert 'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 64.0' in text


def test_without_prefix_caching_nothing_is_shared() -> None:
    s = sched(blocks=64, prefix_caching=False)
    s.add(Sequence("a", 80, 1, 0.0, hashes=chain(1, 2, 3, 4, 5)))
    s.add(Sequence("b", 80, 1, 0.0, hashes=chain(1, 2, 3, 4, 5)))
    while (batch := s.schedule(0.0)) is not None:
        s.complete(batch)
    assert s.cache is None and s.used_blocks == 0


prompts = st.lists(st.tuples(st.lists(st.integers(0, 3), min_size=0, max_size=6),
                             st.integers(0, 15), st.integers(1, 20)), min_size=1, max_size=25)


@settings(max_examples=80, deadline=None)
@given(prompts, st.integers(4, 12), st.integers(1, 4), st.integers(16, 96))
def test_accounting_holds_whatever_the_sharing(reqs: list[tuple[list[int], int, int]],
                                               blocks: int, seqs: int, budget: int) -> None:
    s = sched(blocks=blocks, max_num_seqs=seqs, max_batched_tokens=budget)
    expected = {}
    for i, (ids, tail, out) in enumerate(reqs):
        prompt = 16 * len(ids) + tail
        if prompt + out > blocks * 16 or prompt == 0:
            continue
        assert s.add(Sequence(f"r{i}", prompt, out, 0.0, hashes=chain(*ids))) is None
        expected[f"r{i}"] = out
    events = run(s)
    assert {e.seq_id: e.generated for e in events if e.finished} == expected
    assert s.used_blocks == 0 and s.idle()
    cache = s.cache
    assert cache is not None and cache.hits <= cache.queries
    assert cache.free_cached <= blocks
