"""The priority gate on a fake clock: classes, queue order (Hypothesis), shedding, deadlines,
max wait, cancellation, metrics."""

from __future__ import annotations

import asyncio

import pytest
from fakes.clock import FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from llmroute.config.policy import PriorityConfig
from llmroute.errors import InvalidRequest, Overloaded, PermissionDenied
from llmroute.policy.keys import ApiKey
from llmroute.policy.priority import AdmissionQueue, PriorityClass, PriorityGate, Waiter
from llmroute.policy.priority_metrics import PriorityMetrics

CLASSES = [{"name": "realtime", "ttft_target_s": 0.5}, {"name": "standard", "ttft_target_s": 2},
           {"name": "batch", "ttft_target_s": 30}]


class Fleet:
    """A fleet whose headroom the test sets."""

    def __init__(self, room: int = 0):
        self.room = room

    def __call__(self) -> int:
        return self.room


def make_gate(fleet: Fleet, clock: FakeClock, capacity: int = 4, **cfg):
    registry = CollectorRegistry()
    config = PriorityConfig.model_validate({"classes": CLASSES, **cfg})
    metrics = PriorityMetrics(registry, [c["name"] for c in CLASSES])
    return PriorityGate(config, fleet, capacity, metrics, clock, clock.sleep), registry


def key(priority: str = "standard", **metadata) -> ApiKey:
    return ApiKey("key_1", "AbCd1234", "acme", priority=priority, metadata=metadata)


def sample(registry, name, **labels):
    return registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("k,headers,want", [
    (None, {}, "standard"),
    (key("batch"), {}, "batch"),
    (key("unknown-class"), {}, "standard"),
    (key("batch", priority_header=True), {"x-llmroute-priority": "realtime"}, "realtime"),
    (None, {"x-llmroute-priority": " Batch "}, "batch"),
], ids=["auth-off-default", "key-class", "key-unknown-class", "header-allowed", "auth-off-header"])
def test_the_class_comes_from_the_key_or_an_allowed_header(k, headers, want):
    gate, _ = make_gate(Fleet(), FakeClock())
    assert gate.classify(k, headers).name == want


def test_a_header_naming_no_class_is_400_and_a_key_not_allowed_is_403():
    gate, _ = make_gate(Fleet(), FakeClock())
    with pytest.raises(InvalidRequest) as bad:
        gate.classify(key(), {"x-llmroute-priority": "urgent\u00e9" * 100})
    assert bad.value.status == 400 and bad.value.code == "invalid_priority"
    with pytest.raises(PermissionDenied) as denied:
        gate.classify(key(), {"x-llmroute-priority": "realtime"})
    assert denied.value.code == "priority_not_allowed"


def waiter(rank: int, arrived: float, seq: int, target: float = 1.0) -> Waiter:
    loop = asyncio.new_event_loop()
    try:
        return Waiter(PriorityClass(f"c{rank}", rank, target), arrived, seq, loop.create_future())
    finally:
        loop.close()


arrivals = st.lists(st.tuples(st.integers(0, 2), st.floats(0, 100), st.sampled_from([0.5, 2.0, 30.0])),
                    max_size=40)


@settings(max_examples=60, deadline=None)
@given(arrivals, st.integers(1, 20), st.lists(st.booleans(), max_size=60))
def test_queue_never_serves_a_lower_class_while_a_higher_waits_and_is_edf_within(
        reqs, bound, pops):
    q = AdmissionQueue(bound)
    shed_out: list[Waiter] = []
    served: list[Waiter] = []
    ops = iter(pops)
    for seq, (rank, arrived, target) in enumerate(reqs):
        w = waiter(rank, arrived, seq, target)
        gone = q.push(w)
        if gone is not None:
            shed_out.append(gone)
            assert all(gone.order >= other.order for other in q)  # the worst one goes
        assert len(q) <= bound
        if next(ops, False) and q:
            head = q.pop()
            assert all(head.klass.rank <= other.klass.rank for other in q)
            assert all(head.deadline <= o.deadline for o in q if o.klass.rank == head.klass.rank)
            served.append(head)
    rest = [q.pop() for _ in range(len(q))]
    assert [w.order for w in rest] == sorted(w.order for w in rest)


async def test_free_fleet_lets_requests_through_at_once():
    clock = FakeClock()
    gate, registry = make_gate(Fleet(room=5), clock)
    slot = await gate.enter(gate.classes["batch"])
    assert gate.active == 1 and not gate.queue
    slot.first_token()
    slot.done()
    slot.done()
    assert gate.active == 0
    assert sample(registry, "llmroute_priority_ttft_total", **{"class": "batch", "within": "true"}) == 1


async def test_saturated_fleet_serves_waiters_by_class_then_deadline():
    clock, fleet = FakeClock(), Fleet(room=0)
    gate, registry = make_gate(fleet, clock)
    order: list[str] = []

    async def one(name: str, tag: str):
        slot = await gate.enter(gate.classes[name])
        order.append(tag)
        slot.done()

    tasks = [asyncio.ensure_future(one(n, t)) for n, t in
             [("batch", "b1"), ("standard", "s1"), ("realtime", "r1"), ("standard", "s2")]]
    await asyncio.sleep(0)
    assert sample(registry, "llmroute_priority_queue_length", **{"class": "standard"}) == 2
    fleet.room = 1
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == ["r1", "s1", "s2", "b1"]
    assert sample(registry, "llmroute_priority_wait_seconds_count", **{"class": "batch"}) == 1


async def test_a_full_queue_sheds_batch_first_with_503_and_retry_after():
    clock, fleet = FakeClock(), Fleet(room=0)
    gate, registry = make_gate(fleet, clock, max_queue=2)
    batch = asyncio.ensure_future(gate.enter(gate.classes["batch"]))
    std = asyncio.ensure_future(gate.enter(gate.classes["standard"]))
    await asyncio.sleep(0)
    newcomer = asyncio.ensure_future(gate.enter(gate.classes["realtime"]))
    await asyncio.sleep(0)
    with pytest.raises(Overloaded) as shed:
        await batch
    assert shed.value.status == 503 and shed.value.code == "queue_full"
    assert shed.value.retry_after_s >= 1
    late_batch = asyncio.ensure_future(gate.enter(gate.classes["batch"]))
    with pytest.raises(Overloaded):
        await late_batch  # the worst of a full queue: refused at once
    assert sample(registry, "llmroute_priority_shed_total", **{"class": "batch", "reason": "queue_full"}) == 2
    assert sample(registry, "llmroute_priority_shed_total", **{"class": "standard", "reason": "queue_full"}) == 0
    fleet.room = 4
    await asyncio.wait_for(asyncio.gather(std, newcomer), 5)


async def test_a_request_whose_deadline_cannot_be_met_is_refused_at_once():
    clock, fleet = FakeClock(), Fleet(room=1)
    gate, registry = make_gate(fleet, clock, capacity=1)
    slot = await gate.enter(gate.classes["standard"])
    clock.advance(4.0)  # slots are held 4 s: one place frees every 4 s
    slot.done()
    fleet.room = 0
    with pytest.raises(Overloaded) as refused:
        await gate.enter(gate.classes["realtime"])  # 0.5 s target, ~4 s wait
    assert refused.value.code == "deadline_unmeetable" and refused.value.retry_after_s >= 4
    assert not gate.queue
    waiting = asyncio.ensure_future(gate.enter(gate.classes["batch"]))  # 30 s target: waits
    await asyncio.sleep(0)
    assert len(gate.queue) == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert sample(registry, "llmroute_priority_shed_total", **{"class": "realtime", "reason": "deadline_unmeetable"}) == 1


async def test_time_spent_queued_does_not_count_as_holding_a_place():
    """Slots held 0.25 s by requests that first queued 8 s: a realtime request behind one
    waiter expects ≈ 0.25 · 2 / 4 s, well inside its 0.5 s target, and is queued — were
    the queueing counted as holding, it would expect ≈ 4 s and be refused."""
    clock, fleet = FakeClock(), Fleet(room=0)
    gate, _ = make_gate(fleet, clock, capacity=4)
    queued = [asyncio.ensure_future(gate.enter(gate.classes["batch"])) for _ in range(4)]
    await asyncio.sleep(0)
    clock.advance(8.0)
    fleet.room = 4
    gate.pump()
    slots = await asyncio.gather(*queued)
    assert [s.granted - s.arrived for s in slots] == [8.0] * 4
    fleet.room = 0
    clock.advance(0.25)
    for slot in slots:
        slot.done()
    assert gate._expected_wait(1) == pytest.approx(0.25 / 4)
    ahead = asyncio.ensure_future(gate.enter(gate.classes["standard"]))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(gate.enter(gate.classes["standard"]))
    urgent = asyncio.ensure_future(gate.enter(gate.classes["realtime"]))
    await asyncio.sleep(0)
    assert len(gate.queue) == 3 and not urgent.done()
    fleet.room = 4
    gate.pump()
    await asyncio.wait_for(asyncio.gather(ahead, second, urgent), 5)


async def test_a_waiter_leaves_after_max_wait_and_a_cancelled_one_leaves_the_queue():
    clock, fleet = FakeClock(), Fleet(room=0)
    gate, registry = make_gate(fleet, clock, max_wait_s=1.0, tick_s=0.25)
    timed = asyncio.ensure_future(gate.enter(gate.classes["batch"]))
    with pytest.raises(Overloaded) as late:
        await asyncio.wait_for(timed, 5)
    assert late.value.code == "queue_timeout" and clock.now() >= 1.0
    gone = asyncio.ensure_future(gate.enter(gate.classes["standard"]))
    await asyncio.sleep(0)
    assert len(gate.queue) == 1
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert not gate.queue and gate.active == 0
    assert sample(registry, "llmroute_priority_shed_total", **{"class": "standard", "reason": "client_left"}) == 1
    assert sample(registry, "llmroute_priority_queue_length", **{"class": "standard"}) == 0


async def test_capacity_caps_slots_even_when_stats_lag():
    clock = FakeClock()
    gate, _ = make_gate(Fleet(room=100), clock, capacity=2)
    a = await gate.enter(gate.classes["standard"])
    await gate.enter(gate.classes["standard"])
    third = asyncio.ensure_future(gate.enter(gate.classes["standard"]))
    await asyncio.sleep(0)
    assert not third.done() and len(gate.queue) == 1
    a.done()
    await asyncio.wait_for(third, 5)
    assert gate.active == 2


async def test_a_watched_stream_frees_its_place_when_closed_unread():
    clock = FakeClock()
    gate, _ = make_gate(Fleet(room=3), clock)
    slot = await gate.enter(gate.classes["standard"])

    async def chunks():
        yield b"data: {}\n\n"

    watched = slot.watch(chunks())
    assert [c async for c in watched] == [b"data: {}\n\n"]
    assert gate.active == 0
    other = (await gate.enter(gate.classes["standard"])).watch(chunks())
    await other.aclose()
    assert gate.active == 0
