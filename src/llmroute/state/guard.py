"""What the limits do when the shared state store cannot answer (Redis down or slow).

``Guarded`` wraps a ``StateStore`` and keeps its contract, except that a StateUnavailable
from it does not reach the limiter: with ``fail_closed`` false (the default) ``reserve``
admits and ``lease`` grants an unmetered lease (``admit`` both: limits are not enforced
while the store is down); with ``fail_closed`` true they raise StateUnavailable (503).
``adjust``, ``release`` and ``settle`` never raise: their state lapses by TTL (dropped
here, or sent and lost: the inner store's ``lost`` counts too). A store
whose ``queues_settlements`` is true (Redis: ``adjust`` and ``settle`` return once queued)
is never probed with those: returning proves nothing. Once the
store failed, only one call per ``retry_s`` seconds tries it again (the others answer at
once without waiting on it); the first that succeeds puts it back in use. The change of
state is logged once each way and counted; ``collect()`` exposes the counts to Prometheus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from llmroute.errors import StateUnavailable
from llmroute.state.protocol import Bucket, Charges, Grant, Lease, StateStore

def stop_if_cancelled(exc: BaseException | None = None) -> None:
    """Raise CancelledError (from ``exc``) when the current task is being cancelled. A
    cancellation that lands inside a redis-py call can come back as a ConnectionError or
    TimeoutError, or not at all; a background loop checks this on every turn so that its
    owner's ``cancel`` + ``gather`` never waits for ever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


UNMETERED = "unmetered"
"""The lease id granted while the store is down; releasing it does nothing."""


class Guarded:
    """``StateStore`` over ``inner`` that fails open (or closed) as the module says;
    ``clock`` (monotonic seconds) paces the retries."""

    def __init__(self, inner: StateStore, *, fail_closed: bool, retry_s: float,
                 clock: Callable[[], float]):
        self.inner, self._closed, self._retry_s, self._clock = inner, fail_closed, retry_s, clock
        self.queues_settlements = inner.queues_settlements
        self.up = True
        self._retry_at = 0.0
        self.unmetered = self.refused = self.dropped = self.outages = 0
        self._log = structlog.get_logger("llmroute")

    @property
    def lost(self) -> int:
        """``inner.lost``: settlements sent and not taken (those dropped here while the
        store was down are in ``dropped``)."""
        return self.inner.lost

    async def reserve(self, charges: Charges) -> Grant:
        """``inner.reserve``; while the store is down, every charge admitted (fail open)."""
        ok, grant = await self._call(self.inner.reserve, charges)
        return grant if ok else Grant(True, _unmetered(charges))

    async def lease(self, name: str, limit: int, ttl_s: float) -> str | None:
        """``inner.lease``; while the store is down, the ``UNMETERED`` lease (fail open)."""
        ok, lease_id = await self._call(self.inner.lease, name, limit, ttl_s)
        return lease_id if ok else UNMETERED

    async def adjust(self, charges: Charges) -> None:
        """``inner.adjust``, dropped while the store is down."""
        await self._call(self.inner.adjust, charges, settle=True, blind=self.queues_settlements)

    async def release(self, name: str, lease_id: str) -> None:
        """``inner.release``, dropped for the unmetered lease or while the store is down
        (the lease lapses by its TTL)."""
        if lease_id != UNMETERED:
            await self._call(self.inner.release, name, lease_id, settle=True)

    async def admit(self, charges: Charges, leases: Sequence[Lease]) -> Grant:
        """``inner.admit``; while the store is down, every charge admitted and every lease
        ``UNMETERED`` (fail open)."""
        if self.up:  # straight through while the store answers (a frame less to resume)
            try:
                return await self.inner.admit(charges, leases)
            except StateUnavailable as exc:
                self._went_down(exc, self._clock())
        ok, grant = await self._call(self.inner.admit, charges, leases)
        return grant if ok else Grant(True, _unmetered(charges),
                                      lease_ids=(UNMETERED,) * len(leases))

    async def settle(self, charges: Charges, held: Sequence[tuple[str, str]]) -> None:
        """``inner.settle`` without the unmetered leases, dropped while the store is down."""
        metered = [h for h in held if h[1] != UNMETERED]
        if not (charges or metered):
            return
        if self.up:  # as ``admit``
            try:
                return await self.inner.settle(charges, metered)
            except StateUnavailable as exc:
                self._went_down(exc, self._clock())
        await self._call(self.inner.settle, charges, metered, settle=True,
                         blind=self.queues_settlements)

    async def ping(self) -> None:
        """``inner.ping``; logs (once) and counts when the store does not answer, never
        raises."""
        await self._call(self.inner.ping, settle=True)

    async def close(self) -> None:
        """``inner.close``."""
        await self.inner.close()

    async def _call(self, method: Callable[..., Awaitable[Any]], *args: Any,
                    settle: bool = False, blind: bool = False) -> tuple[bool, Any]:
        """``(True, result)`` from the store, or ``(False, None)`` when it is down; raises
        StateUnavailable when down, ``fail_closed`` and not ``settle``. A ``blind`` call
        (only queued by the store: its return proves nothing) is never the probe while
        the store is down."""
        now = self._clock()
        if self.up or (now >= self._retry_at and not blind):
            self._retry_at = now + self._retry_s  # while down: this call is the one probe
            try:
                result = await method(*args)
            except StateUnavailable as exc:
                self._went_down(exc, now)
            else:
                if not self.up:
                    self.up = True
                    self._log.info("state_store_available")
                return True, result
        return self._down(settle)

    def _down(self, settle: bool) -> tuple[bool, None]:
        if settle:
            self.dropped += 1
        elif self._closed:
            self.refused += 1
            raise StateUnavailable("The rate-limit state store is unavailable; the request "
                                   "was refused rather than admitted unmetered. Please "
                                   "retry shortly.")
        else:
            self.unmetered += 1
        return False, None

    def _went_down(self, exc: StateUnavailable, now: float) -> None:
        """Log and count the outage (once); the next probe ``retry_s`` after ``now``."""
        self._retry_at = now + self._retry_s
        if self.up:
            self.up = False
            self.outages += 1
            self._log.warning("state_store_unavailable", error=exc.message,
                              limits="refused (fail_closed)" if self._closed else "not enforced")

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """``llmroute_state_up``, ``llmroute_state_outages_total`` and
        ``llmroute_state_unavailable_calls_total{outcome}``."""
        yield GaugeMetricFamily("llmroute_state_up", "1 while the shared state store "
                                "answers, 0 while the limits run without it", value=int(self.up))
        yield CounterMetricFamily("llmroute_state_outages", "Times the shared state store "
                                  "stopped answering", value=self.outages)
        calls = CounterMetricFamily("llmroute_state_unavailable_calls", "State-store calls "
                                    "answered without the store, by outcome",
                                    labels=["outcome"])
        dropped = self.dropped + self.inner.lost  # sent, then failed
        for outcome, n in (("unmetered", self.unmetered), ("refused", self.refused),
                           ("dropped", dropped)):
            calls.add_metric([outcome], n)
        yield calls


def _unmetered(charges: Charges) -> tuple[float, ...]:
    """The levels reported while the store is down (``Grant.flat_levels``): the whole of
    each limit remains."""
    return tuple([x for limit, _ in charges
                  for x in (limit.capacity if isinstance(limit, Bucket) else limit.limit, 0.0)])


async def repeat(step: Callable[[], Awaitable[None]], interval_s: float) -> None:
    """``await step()`` every ``interval_s`` seconds until cancelled (a fleet's exchange
    loop: ``state/load.py``, ``state/prefix.py``); a cancellation ``step`` swallowed still
    stops the loop (``stop_if_cancelled``)."""
    while True:
        await step()
        stop_if_cancelled()
        await asyncio.sleep(interval_s)
