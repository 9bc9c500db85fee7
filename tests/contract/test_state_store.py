"""The contract every StateStore keeps (``state/protocol.py``), run against each
implementation: the in-process store and the Redis store on a real redis-server (slow:
it starts one; skipped without the binary). A store is built by ``make(clock)``: time is
the FakeClock's, so the Redis store runs these with an injected clock instead of
Redis's ``TIME``; each store gets a key prefix of its own."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from fakes.clock import FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.state.memory import MemoryStore
from llmroute.state.protocol import Bucket, Charge, Counter, Lease
from llmroute.state.redis import RedisStore

KINDS = ["memory", pytest.param("redis", marks=[pytest.mark.slow, pytest.mark.redis])]


def store_factory(kind, request):
    """``clock → store`` for ``kind``; a Redis store gets a fresh key prefix each time."""
    if kind == "memory":
        return MemoryStore
    url = request.getfixturevalue("redis_server").url
    return lambda clock: RedisStore(url, 10.0, prefix=f"t{uuid.uuid4().hex}:", clock=clock)


@pytest.fixture(params=KINDS)
async def make(request):
    factory = store_factory(request.param, request)
    made = []

    def build(clock):
        made.append(factory(clock))
        return made[-1]

    yield build
    for store in made:
        await store.close()


RPM = Bucket("rpm:k", 5, 60.0)


async def test_a_bucket_admits_its_capacity_then_refuses_with_the_refill_time(make):
    clock = FakeClock()
    store = make(clock)
    grants = [await store.reserve([Charge(RPM, 1)]) for _ in range(6)]
    assert [g.allowed for g in grants] == [True] * 5 + [False]
    assert grants[4].levels[0].remaining == 0 and grants[4].levels[0].reset_s == 60.0
    assert grants[5].denied == 0 and grants[5].retry_after_s == pytest.approx(12.0)
    clock.advance(11.9)
    assert not (await store.reserve([Charge(RPM, 1)])).allowed
    clock.advance(0.1)
    assert (await store.reserve([Charge(RPM, 1)])).allowed


async def test_a_call_takes_every_charge_or_none(make):
    store = make(FakeClock())
    tpm = Bucket("tpm:k", 100, 60.0)
    assert (await store.reserve([Charge(RPM, 1), Charge(tpm, 80)])).allowed
    refused = await store.reserve([Charge(RPM, 1), Charge(tpm, 30)])
    assert not refused.allowed and refused.denied == 1
    assert refused.levels[0].remaining == 4  # the RPM charge was not taken
    assert refused.retry_after_s == pytest.approx(10 / (100 / 60))


async def test_a_cost_above_the_capacity_is_never_admitted(make):
    grant = await make(FakeClock()).reserve([Charge(Bucket("tpm:k", 100, 60.0), 101)])
    assert not grant.allowed and grant.retry_after_s is None


async def test_adjust_gives_back_and_charges_debt_without_passing_capacity(make):
    clock = FakeClock()
    store = make(clock)
    tpm = Bucket("tpm:k", 100, 60.0)
    await store.reserve([Charge(tpm, 100)])
    await store.adjust([Charge(tpm, -60)])  # the answer used 40 of the 100 reserved
    assert (await store.reserve([Charge(tpm, 60)])).levels[0].remaining == 0
    await store.adjust([Charge(tpm, 30)])  # used 30 more than reserved: debt
    refused = await store.reserve([Charge(tpm, 1)])
    assert refused.levels[0].remaining == pytest.approx(-30)
    assert refused.retry_after_s == pytest.approx(31 / (100 / 60))
    await store.adjust([Charge(tpm, -1000)])
    assert (await store.reserve([Charge(tpm, 0)])).levels[0].remaining == 100


async def test_a_counter_counts_to_its_limit_and_resets_after_its_ttl(make):
    clock = FakeClock()
    store = make(clock)
    day = Counter("quota:day:k:20250101", 1000, 3600.0)
    assert (await store.reserve([Charge(day, 900)])).allowed
    refused = await store.reserve([Charge(day, 200)])
    assert not refused.allowed and refused.retry_after_s == pytest.approx(3600.0)
    assert refused.levels[0].remaining == 100 and refused.levels[0].reset_s == 3600.0
    await store.adjust([Charge(day, -500)])
    assert (await store.reserve([Charge(day, 200)])).levels[0].remaining == 400
    clock.advance(3600.0)
    assert (await store.reserve([Charge(day, 1000)])).allowed
    assert (await make(clock).reserve([Charge(day, 1001)])).retry_after_s is None


async def test_leases_cap_holders_expire_and_release(make):
    clock = FakeClock()
    store = make(clock)
    first = await store.lease("conc:k", 2, 30.0)
    second = await store.lease("conc:k", 2, 30.0)
    assert first and second and first != second
    assert await store.lease("conc:k", 2, 30.0) is None
    await store.release("conc:k", first)
    await store.release("conc:k", "no-such-lease")
    third = await store.lease("conc:k", 2, 30.0)
    assert third is not None
    clock.advance(30.0)  # both held leases expire
    assert await store.lease("conc:k", 2, 30.0) is not None
    assert await store.lease("conc:k", 2, 30.0) is not None
    await store.close()


CONC = Lease("conc:k", 2, 30.0)


async def test_admit_takes_the_charges_and_the_lease_together(make):
    store = make(FakeClock())
    first = await store.admit([Charge(RPM, 1)], [CONC])
    assert first.allowed and len(first.lease_ids) == 1 and first.levels[0].remaining == 4
    second = await store.admit([Charge(RPM, 1)], [CONC])
    assert second.allowed and second.lease_ids[0] != first.lease_ids[0]
    full = await store.admit([Charge(RPM, 1)], [CONC])
    assert not full.allowed and full.full == 0 and full.denied is None
    assert full.levels[0].remaining == 3  # the RPM charge was not taken
    await store.settle([], [(CONC.name, first.lease_ids[0])])
    assert (await store.admit([Charge(RPM, 1)], [CONC])).allowed


async def test_a_refused_charge_takes_no_lease_and_a_full_lease_refuses_first(make):
    store = make(FakeClock())
    one = Bucket("rpm:one", 1, 60.0)
    assert (await store.admit([Charge(one, 1)], [CONC])).allowed
    refused = await store.admit([Charge(one, 1)], [CONC])
    assert not refused.allowed and refused.denied == 0 and refused.full is None
    assert refused.lease_ids == () and refused.retry_after_s == pytest.approx(60.0)
    assert (await store.admit([], [CONC])).allowed  # the refused call left its slot free
    both = await store.admit([Charge(one, 1)], [Lease("conc:t", 5, 30.0), CONC])
    assert not both.allowed and both.full == 1 and both.denied is None
    assert (await store.admit([], [Lease("conc:t", 1, 30.0)])).allowed  # none taken


async def test_settle_reconciles_and_releases_in_one_call(make):
    store = make(FakeClock())
    tpm = Bucket("tpm:k", 100, 60.0)
    grant = await store.admit([Charge(tpm, 100)], [Lease("conc:k", 1, 30.0)])
    assert not (await store.admit([], [Lease("conc:k", 1, 30.0)])).allowed
    await store.settle([Charge(tpm, -60)], [("conc:k", grant.lease_ids[0])])
    assert (await store.admit([Charge(tpm, 60)], [Lease("conc:k", 1, 30.0)])).allowed
    await store.settle([], [])  # nothing to do


async def test_admitted_leases_lapse_after_their_ttl(make):
    clock = FakeClock()
    store = make(clock)
    assert (await store.admit([], [Lease("conc:x", 1, 5.0)])).allowed
    clock.advance(4.9)
    assert not (await store.admit([], [Lease("conc:x", 1, 5.0)])).allowed
    clock.advance(0.1)
    assert (await store.admit([], [Lease("conc:x", 1, 5.0)])).allowed


async def test_concurrent_admissions_never_pass_a_lease_or_a_bucket(make):
    store = make(FakeClock())
    bucket, lease = Bucket("rpm:race", 50, 60.0), Lease("conc:race", 20, 30.0)
    grants = await asyncio.gather(*(store.admit([Charge(bucket, 1)], [lease])
                                    for _ in range(200)))
    assert sum(g.allowed for g in grants) == 20
    held = [lid for g in grants for lid in g.lease_ids]
    assert len(set(held)) == 20
    await asyncio.gather(*(store.settle([], [(lease.name, lid)]) for lid in held))
    grants = await asyncio.gather(*(store.admit([Charge(bucket, 1)], [lease])
                                    for _ in range(200)))
    assert sum(g.allowed for g in grants) == 20  # 40 of the bucket's 50 taken in all


async def test_concurrent_reservations_never_pass_the_limit(make):
    store = make(FakeClock())
    bucket = Bucket("rpm:hot", 50, 60.0)
    grants = await asyncio.gather(*(store.reserve([Charge(bucket, 1)]) for _ in range(200)))
    assert sum(g.allowed for g in grants) == 50


@pytest.mark.parametrize("kind", KINDS)
def test_admitted_units_stay_inside_the_bucket_envelope(kind, request):
    """Over any interval of length w the bucket admits at most capacity + rate × w."""
    factory = store_factory(kind, request)

    @settings(max_examples=60, deadline=None)
    @given(steps=st.lists(st.tuples(st.floats(0, 5), st.integers(0, 40)), min_size=1,
                          max_size=80))
    def check(steps):
        asyncio.run(_envelope(factory, steps))

    check()


async def _envelope(factory, steps):
    clock = FakeClock()
    store = factory(clock)
    bucket = Bucket("tpm:h", 100, 10.0)
    admitted: list[tuple[float, int]] = []
    for gap, cost in steps:
        clock.advance(gap)
        if (await store.reserve([Charge(bucket, cost)])).allowed:
            admitted.append((clock.now(), cost))
    await store.close()
    for i, (start, _) in enumerate(admitted):
        total = 0
        for at, cost in admitted[i:]:
            total += cost
            assert total <= bucket.capacity + bucket.rate * (at - start) + 1e-6
