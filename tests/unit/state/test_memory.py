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


async def test_leases_of_different_ttls_on_one_name_each_lapse_on_time():
    clock = FakeClock()
    store = memory.MemoryStore(clock)
    long = await store.lease("l", 2, 100.0)
    short = await store.lease("l", 2, 10.0)
    assert long and short and await store.lease("l", 2, 10.0) is None
    clock.advance(10.0)  # the short one lapsed although taken after the long one
    again = await store.lease("l", 2, 10.0)
    assert again is not None and await store.lease("l", 2, 10.0) is None
    await store.release("l", again)  # the soonest expiry is released, the long one holds
    clock.advance(89.0)
    assert await store.lease("l", 2, 50.0) is not None
    assert await store.lease("l", 2, 50.0) is None  # the long one still holds
    clock.advance(1.0)  # now it lapses too
    assert await store.lease("l", 2, 50.0) is not None
    assert await store.lease("l", 2, 50.0) is None
