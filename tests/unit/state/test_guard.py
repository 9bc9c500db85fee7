"""The fail-open guard over a store that can be switched off: limits not enforced (or
refused, fail closed) while it is down, one probe per retry interval, one log line per
change of state, counts for Prometheus, and the store used again once it answers."""

from __future__ import annotations

import pytest
from fakes.clock import FakeClock
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from llmroute.errors import StateUnavailable
from llmroute.state.guard import UNMETERED, Guarded
from llmroute.state.memory import MemoryStore
from llmroute.state.protocol import Bucket, Charge, Counter, Lease

RPM = Bucket("rpm:k", 2, 60.0)


class Switchable(MemoryStore):
    """A MemoryStore that raises StateUnavailable on every call while ``down``; counts
    the calls that reached it."""

    def __init__(self, clock):
        super().__init__(clock)
        self.down = False
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise StateUnavailable("the test store is down")

    async def reserve(self, charges):
        self._check()
        return await super().reserve(charges)

    async def adjust(self, charges):
        self._check()
        await super().adjust(charges)

    async def lease(self, name, limit, ttl_s):
        self._check()
        return await super().lease(name, limit, ttl_s)

    async def release(self, name, lease_id):
        self._check()
        await super().release(name, lease_id)

    async def admit(self, charges, leases):
        self._check()
        return await super().admit(charges, leases)

    async def settle(self, charges, held):
        self._check()
        await super().settle(charges, held)

    async def ping(self):
        self._check()


def guarded(fail_closed: bool = False, retry_s: float = 1.0):
    clock = FakeClock()
    inner = Switchable(clock)
    return Guarded(inner, fail_closed=fail_closed, retry_s=retry_s, clock=clock), inner, clock


async def test_fail_open_admits_unmetered_logs_once_and_probes_once_per_interval():
    guard, inner, clock = guarded()
    assert [(await guard.reserve([Charge(RPM, 1)])).allowed for _ in range(3)] == \
        [True, True, False]
    inner.down = True
    inner.calls = 0
    with capture_logs() as logs:
        grants = [await guard.reserve([Charge(RPM, 1), Charge(Counter("q", 50, 9.0), 5)])
                  for _ in range(5)]
        lease = await guard.lease("conc:k", 1, 30.0)
        await guard.release("conc:k", lease)
        await guard.adjust([Charge(RPM, -1)])
    assert all(g.allowed for g in grants)
    assert grants[0].levels[0].remaining == 2 and grants[0].levels[1].remaining == 50
    assert lease == UNMETERED and inner.calls == 1  # one probe, the rest answered at once
    assert [entry["event"] for entry in logs] == ["state_store_unavailable"]
    assert logs[0]["limits"] == "not enforced"
    assert (guard.unmetered, guard.dropped, guard.outages, guard.up) == (6, 1, 1, False)


async def test_the_store_is_used_again_once_it_answers():
    guard, inner, clock = guarded()
    inner.down = True
    await guard.reserve([Charge(RPM, 1)])
    inner.down = False
    assert (await guard.reserve([Charge(RPM, 1)])).levels[0].remaining == 2  # unmetered
    clock.advance(1.0)
    with capture_logs() as logs:
        grants = [await guard.reserve([Charge(RPM, 1)]) for _ in range(3)]
    assert [g.allowed for g in grants] == [True, True, False]  # enforced again
    assert [entry["event"] for entry in logs] == ["state_store_available"]
    assert guard.up


async def test_fail_closed_refuses_admission_but_never_a_settlement():
    guard, inner, _ = guarded(fail_closed=True, retry_s=0.0)
    inner.down = True
    with pytest.raises(StateUnavailable) as caught:
        await guard.reserve([Charge(RPM, 1)])
    with pytest.raises(StateUnavailable):
        await guard.lease("conc:k", 1, 30.0)
    await guard.adjust([Charge(RPM, -1)])
    await guard.release("conc:k", "1")
    await guard.ping()
    assert caught.value.status == 503 and caught.value.code == "state_unavailable"
    assert (guard.refused, guard.dropped, guard.unmetered) == (2, 3, 0)


async def test_the_counts_are_exposed_to_prometheus():
    guard, inner, _ = guarded(retry_s=0.0)
    registry = CollectorRegistry()
    registry.register(guard)
    inner.down = True
    await guard.reserve([Charge(RPM, 1)])
    await guard.adjust([Charge(RPM, 1)])
    value = registry.get_sample_value
    assert value("llmroute_state_up") == 0
    assert value("llmroute_state_outages_total") == 1
    assert value("llmroute_state_unavailable_calls_total", {"outcome": "unmetered"}) == 1
    assert value("llmroute_state_unavailable_calls_total", {"outcome": "dropped"}) == 1
    inner.down = False
    await guard.ping()
    assert value("llmroute_state_up") == 1


async def test_admit_fails_open_with_unmetered_leases_that_settle_drops():
    guard, inner, clock = guarded()
    conc = Lease("conc:k", 1, 30.0)
    taken = await guard.admit([Charge(RPM, 1)], [conc])
    assert taken.allowed and taken.lease_ids[0] != UNMETERED
    assert (await guard.admit([Charge(RPM, 1)], [conc])).full == 0
    inner.down = True
    inner.calls = 0
    grant = await guard.admit([Charge(RPM, 1)], [conc, Lease("conc:t", 1, 30.0)])
    assert grant.allowed and grant.lease_ids == (UNMETERED, UNMETERED)
    assert grant.levels[0].remaining == 2
    await guard.settle([], [("conc:k", UNMETERED)])  # nothing left to settle: no call
    assert inner.calls == 1 and guard.unmetered == 1 and guard.dropped == 0
    inner.down = False
    clock.advance(1.0)
    await guard.settle([Charge(RPM, -1)], [("conc:k", taken.lease_ids[0]),
                                           ("conc:t", UNMETERED)])
    assert guard.up and inner.calls == 2
    again = await guard.admit([], [conc])
    assert again.allowed and again.lease_ids[0] != UNMETERED  # the real lease was released


async def test_fail_closed_refuses_admit_but_never_settle():
    guard, inner, _ = guarded(fail_closed=True, retry_s=0.0)
    inner.down = True
    with pytest.raises(StateUnavailable):
        await guard.admit([Charge(RPM, 1)], [Lease("conc:k", 1, 30.0)])
    await guard.settle([Charge(RPM, -1)], [("conc:k", "1")])
    assert (guard.refused, guard.dropped) == (1, 1)


async def test_queued_settlements_never_probe_a_store_that_is_down():
    clock = FakeClock()
    inner = Switchable(clock)
    inner.queues_settlements = True  # as the Redis store: settle returns once queued
    guard = Guarded(inner, fail_closed=False, retry_s=1.0, clock=clock)
    inner.down = True
    await guard.reserve([Charge(RPM, 1)])
    inner.down, inner.calls = False, 0
    clock.advance(1.0)
    await guard.settle([Charge(RPM, -1)], [("conc:k", "1")])
    await guard.adjust([Charge(RPM, -1)])
    assert inner.calls == 0 and not guard.up and guard.dropped == 2  # proves nothing
    assert (await guard.reserve([Charge(RPM, 1)])).allowed and guard.up  # the probe
    await guard.settle([Charge(RPM, -1)], [])
    assert inner.calls == 2


async def test_fail_closed_refuses_without_calling_the_store_until_the_retry_interval():
    """Fail closed, a store that is down costs one probe per ``retry_s``: the refusals in
    between answer at once, and a store back up admits again only from the next probe."""
    guard, inner, clock = guarded(fail_closed=True, retry_s=1.0)
    conc = Lease("conc:k", 1, 30.0)
    inner.down = True
    for _ in range(4):
        with pytest.raises(StateUnavailable):
            await guard.admit([Charge(RPM, 1)], [conc])
    assert inner.calls == 1 and guard.refused == 4  # one call reached the store
    inner.down = False
    clock.advance(0.5)
    with pytest.raises(StateUnavailable):  # within the interval: not asked yet
        await guard.admit([Charge(RPM, 1)], [conc])
    assert inner.calls == 1 and not guard.up
    clock.advance(0.5)
    grant = await guard.admit([Charge(RPM, 1)], [conc])
    assert grant.allowed and grant.lease_ids[0] != UNMETERED and guard.up
    assert inner.calls == 2 and guard.refused == 5
