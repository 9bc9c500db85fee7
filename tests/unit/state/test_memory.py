"""The in-process store keeps only live state: the sweep drops expired counters and
buckets that have refilled, and leases vanish with their last holder."""

from __future__ import annotations

from fakes.clock import FakeClock

from llmroute.state import memory
from llmroute.state.protocol import Bucket, Charge, Counter


async def test_the_sweep_drops_expired_counters_and_full_buckets(monkeypatch):
    monkeypatch.setattr(memory, "SWEEP_EVERY", 4)
    clock = FakeClock()
    store = memory.MemoryStore(clock)
    await store.reserve([Charge(Bucket("b", 10, 60.0), 10), Charge(Counter("c", 5, 30.0), 1)])
    clock.advance(60.0)  # the bucket is full again and the counter expired
    await store.reserve([Charge(Bucket("live", 10, 60.0), 1)])
    await store.reserve([])
    await store.reserve([])  # the 4th call sweeps
    assert set(store._buckets) == {"live"} and not store._counters
    lid = await store.lease("l", 1, 10.0)
    await store.release("l", lid)
    assert not store._leases
