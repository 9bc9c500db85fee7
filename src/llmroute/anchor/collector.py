"""The signal collector: one polling loop per backend at the I/O edge.

Each loop polls its source every ``period_s`` seconds (default 0.2), gives each poll at
most ``timeout_s`` seconds, stores the immutable, timestamped snapshot in the
``SignalStore``, and after a failed poll waits ``min(period_s · 2^(failures-1), max_backoff_s)``
(exponential back-off, so a dead endpoint costs one request every ``max_backoff_s`` at
most). A failed poll never reaches request handling: the store keeps the last good
snapshot, which turns stale and drops out of scoring. It logs only on a state change
(first contact, up → down, down → up, a change in which signals are missing or rejected as
nonsense, a GPU turning hot or cooling down: ``anchor/readings.py``).

Shared polls (``share``, a fleet of replicas: ``state/polls.py``): before each poll the
loop asks ``share.lead``; when another replica holds the engine's poll lease it stores
that replica's published outcome instead of polling (nothing when none is published yet),
and when this replica polls it publishes the outcome for the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from llmroute.anchor.protocol import MetricsSource
from llmroute.anchor.store import Entry, SignalStore
from llmroute.errors import SignalSourceError
from llmroute.types import Backend, EngineSignals

log = structlog.get_logger("llmroute.anchor.collector")
Sleep = Callable[[float], Awaitable[None]]


class SharedPoll(Protocol):
    """One poller per engine across a fleet (``state.polls.SharedPolls``)."""

    async def lead(self, backend_id: str) -> bool:
        """True when this replica polls ``backend_id`` now."""
        ...

    async def publish(self, backend_id: str,
                      outcome: tuple[EngineSignals | None, str | None]) -> None:
        """Share this replica's poll outcome: ``(signals, None)`` or ``(None, error)``."""
        ...

    async def read(self, backend_id: str, now: float
                   ) -> tuple[EngineSignals | None, str | None] | None:
        """The polling replica's last outcome (None: none published)."""
        ...


def next_delay(period_s: float, failures: int, max_backoff_s: float) -> float:
    """Seconds until the next poll: ``period_s`` after a good poll (``failures`` = 0), else
    ``period_s · 2^(failures-1)`` capped at ``max_backoff_s`` (never below ``period_s``)."""
    if failures <= 0:
        return period_s
    return max(period_s, min(period_s * 2 ** min(failures - 1, 30), max_backoff_s))


@dataclass
class Collector:
    """Polls ``sources`` (``{backend_id: (backend, source)}``) into ``store``.

    ``clock`` gives seconds (monotonic); ``sleep`` is injected for tests; ``share`` (None:
    poll alone) shares the polls with a fleet."""

    sources: dict[str, tuple[Backend, MetricsSource]]
    store: SignalStore
    clock: Callable[[], float]
    period_s: float = 0.2
    timeout_s: float = 0.5
    max_backoff_s: float = 10.0
    sleep: Sleep = asyncio.sleep
    share: SharedPoll | None = None
    polls: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _stopping: bool = False

    async def poll_once(self, backend_id: str) -> bool:
        """One poll of one backend into the store (or, with ``share`` and another replica
        polling, that replica's outcome); True when it succeeded."""
        share = self.share
        if share is not None and not await share.lead(backend_id):
            now = self.clock()
            return self._adopt(backend_id, await share.read(backend_id, now), now)
        ok, outcome = await self._poll(backend_id)
        if share is not None:
            await share.publish(backend_id, outcome)
        return ok

    async def _poll(self, backend_id: str) -> tuple[bool, tuple[EngineSignals | None,
                                                                 str | None]]:
        backend, source = self.sources[backend_id]
        now = self.clock()
        self.polls += 1
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that arrives as the poll completes (CPython gh-86296), and stop() would hang.
            async with asyncio.timeout(self.timeout_s):
                signals = await source.poll(backend, now)
        except (SignalSourceError, TimeoutError) as exc:
            error = getattr(exc, "message", None) or f"no answer within {self.timeout_s} s"
            return self._adopt(backend_id, (None, error), now), (None, error)
        return self._adopt(backend_id, (signals, None), now), (signals, None)

    def _adopt(self, backend_id: str,
               outcome: tuple[EngineSignals | None, str | None] | None, now: float) -> bool:
        """Store ``outcome`` of the poll at ``now`` (None: nothing); True for signals."""
        if outcome is None:
            return False
        signals, error = outcome
        if signals is None:
            _log_change(backend_id, self.store.record_failure(backend_id, error or "", now),
                        self.store.entry(backend_id))
            return False
        _log_change(backend_id, self.store.record_ok(backend_id, signals, now),
                    self.store.entry(backend_id))
        return True

    async def run(self, backend_id: str) -> None:
        """Poll ``backend_id`` until cancelled or stopped."""
        while not self._stopping:
            await self.poll_once(backend_id)
            failures = self.store.entry(backend_id).failures
            await self.sleep(next_delay(self.period_s, failures, self.max_backoff_s))

    def start(self) -> None:
        """Start one loop per source (inside a running event loop)."""
        self._stopping = False
        self._tasks = [asyncio.create_task(self.run(b), name=f"collector:{b}")
                       for b in self.sources]

    async def stop(self) -> None:
        """Cancel every loop and wait for them to end."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []


def _log_change(backend_id: str, old: Entry, new: Entry) -> None:
    if old.hot != new.hot:
        temp = new.signals.gpu_temp_c if new.signals is not None else None
        log.warning("gpu_hot" if new.hot else "gpu_cooled", backend=backend_id,
                    gpu_temp_c=temp)
    if _rejected(old) != _rejected(new):
        log.warning("signals_rejected", backend=backend_id, rejected=list(_rejected(new)))
    if old.state != new.state:
        log.info("signals_state", backend=backend_id, state=new.state, was=old.state,
                 error=new.error, missing=list(_missing(new) or ()))
        return
    if new.state == "up" and _missing(old) != _missing(new):
        log.info("signals_missing", backend=backend_id, missing=list(_missing(new) or ()))


def _rejected(entry: Entry) -> tuple[str, ...]:
    return entry.signals.rejected if entry.signals is not None else ()


QUANTILES = frozenset({"ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms"})
"""Missing whenever a histogram has no observation yet (normal when idle): not logged."""


def _missing(entry: Entry) -> tuple[str, ...] | None:
    if entry.signals is None:
        return None
    return tuple(n for n in entry.signals.missing if n not in QUANTILES)
