"""The precise prefix index from KV-cache events: ordered application, and the faults —
duplicated, lost, out-of-order and restarted streams, unknown backends, malformed messages,
its memory bound — never leave it claiming blocks an engine does not hold; the events of a
real emulated engine, read over ZeroMQ, match the engine's own cache."""

from __future__ import annotations

import asyncio

import msgspec
from fakes.anchor_ctx import backends, context, request, signals

from llmroute.anchor.kv_index import KvEventIndex
from llmroute.anchor.prefix import Affinity
from llmroute.anchor.sources.kv_events import KvEventSubscriber
from llmroute.blocks import block_hashes
from llmroute.emulator.engine import EmulatedEngine, running
from llmroute.emulator.spec import EngineSpec
from llmroute.kvevents import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    decode,
    encode,
)


def stored(*hashes: int, ts: float = 0.0) -> EventBatch:
    return EventBatch(ts, [BlockStored(list(hashes), None, [], 16, None, "GPU")])


def removed(*hashes: int) -> EventBatch:
    return EventBatch(0.0, [BlockRemoved(list(hashes), "GPU")])


def test_blocks_stored_and_removed_in_order() -> None:
    index = KvEventIndex(["a"])
    index.apply("a", 0, stored(1, 2, 3))
    index.apply("a", 1, removed(3))
    assert index.matched("a", [1, 2, 3]) == 2 and index.block_size("a") == 16
    index.apply("a", 2, EventBatch(0.0, [AllBlocksCleared()]))
    assert index.matched("a", [1]) == 0


def test_a_duplicated_or_late_message_is_dropped() -> None:
    index = KvEventIndex(["a"])
    index.apply("a", 0, stored(1, 2))
    index.apply("a", 1, removed(2))
    assert not index.apply("a", 1, removed(2)) and not index.apply("a", 0, stored(1, 2))
    assert index.matched("a", [1, 2]) == 1 and index.duplicates == 2


def test_a_gap_forgets_what_the_lost_messages_might_have_removed() -> None:
    index = KvEventIndex(["a"])
    index.apply("a", 0, stored(1, 2))
    index.apply("a", 5, stored(7))  # 1-4 lost: one of them may have removed 1 or 2
    assert index.matched("a", [1]) == 0 and index.matched("a", [7]) == 1
    assert index.gaps == 1


def test_a_restarted_engine_starts_again_from_zero_with_an_empty_cache() -> None:
    index = KvEventIndex(["a"])
    for seq in range(3):
        index.apply("a", seq, stored(seq + 10, ts=1.0))
    index.apply("a", 0, stored(99, ts=2.0))  # a new publisher, later
    assert index.matched("a", [10]) == 0 and index.matched("a", [99]) == 1
    assert index.restarts == 1


def test_events_for_an_unknown_backend_are_dropped() -> None:
    index = KvEventIndex(["a"])
    assert not index.apply("ghost", 0, stored(1))
    assert index.unknown == 1 and index.matched("ghost", [1]) == 0


def test_the_index_never_outgrows_its_bound() -> None:
    index = KvEventIndex(["a"], capacity=100)
    for seq in range(50):
        index.apply("a", seq, stored(*range(seq * 10, seq * 10 + 10)))
    assert index.size("a") == 100 and index.matched("a", [490]) == 1


def test_a_poll_showing_the_counters_reset_forgets_the_backend() -> None:
    events = KvEventIndex(["a"])
    affinity = Affinity(events=events)
    affinity.pricing = True
    text = "z" * 48 * 4
    events.apply("a", 0, stored(*block_hashes(text, 16)))
    ask = request(text, prompt_tokens=70)
    ab = backends("a")
    before = affinity.cached_tokens(context(
        engines={"a": signals(prefix_cache_queries_total=500, prefix_cache_hits_total=100)},
        req=ask), ab)
    assert before == [64.0]
    after = affinity.cached_tokens(context(  # the engine restarted: its counters are back to 0
        engines={"a": signals(prefix_cache_queries_total=0, prefix_cache_hits_total=0)},
        req=ask), ab)
    assert after == [0.0] and not events.live("a")


def test_malformed_messages_are_counted_and_dropped() -> None:
    index = KvEventIndex(["a"])
    sub = KvEventSubscriber({}, index)
    assert not sub.handle("a", [b"", b"\x00" * 8])
    assert not sub.handle("a", [b"", b"\x00" * 8, b"\xc1not msgpack"])
    assert not sub.handle("a", [b"", b"\x00" * 8, msgspec.msgpack.encode({"ts": 1})])
    assert sub.handle("a", [b"", (0).to_bytes(8, "big"), encode(stored(5))])
    assert sub.bad == 3 and index.matched("a", [5]) == 1


def test_newer_vllm_fields_are_read_by_position() -> None:
    raw = msgspec.msgpack.encode([1.0, [["BlockStored", [1, 2], None, [], 16, None, "GPU",
                                        "lora", None, 0, "full", None], ["Other"]], 0])
    batch = decode(raw)
    assert batch.events == [BlockStored([1, 2], None, [], 16, None, "GPU")]


async def test_an_emulated_engines_events_match_its_own_cache() -> None:
    spec = EngineSpec("a100-80g", "1b", time_scale=0.01, kv_events="tcp://127.0.0.1:*")
    engine = EmulatedEngine(spec)
    index = KvEventIndex(["e"])
    text = "".join(f"{i:047d}|" for i in range(40))  # 40 engine blocks
    async with running(engine), KvEventSubscriber(
            {"e": engine.publisher.endpoint}, index).run():  # type: ignore[union-attr]
        await asyncio.sleep(0.2)  # the subscription reaches the publisher
        handle = engine.submit(650, 2, engine.prompt_hashes(text))
        async for _ in handle.updates():  # type: ignore[union-attr]
            pass
        for _ in range(50):
            if index.size("e") == 40:
                break
            await asyncio.sleep(0.02)
    hashes = block_hashes(text, 16)
    assert index.matched("e", hashes) == 40
    assert all(engine.scheduler.cache.cached(h) for h in hashes)  # type: ignore[union-attr]
