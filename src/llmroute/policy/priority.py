"""SLO priority classes: admission when every engine is saturated (docs/policies.md).

A request's class comes from its key (``ApiKey.priority``), or from the
``x-llmroute-priority`` header when the key allows it (``classify``). ``PriorityGate.enter``
lets it through at once while the fleet has room (``headroom() > 0`` and nobody waits);
otherwise it waits in the ``AdmissionQueue``, ordered by class (highest first), then
earliest deadline (arrival + the class's TTFT target), then arrival. The queue is bounded:
when full, the worst waiter (lowest class, latest deadline) is shed with 503 — or the
newcomer, when it is the worst. A request whose deadline the queue cannot meet (estimated
wait beyond its TTFT target) is refused at once; a waiter leaves after ``max_wait_s``, or
when its task is cancelled (the client disconnected). Places open when a slot is done and
on a tick (engine signals change by themselves); the tick runs only while someone waits.

The gate owns no I/O: ``headroom`` (``policy/load.py``), the clock and sleep are injected.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field

from llmroute.config.policy import PriorityConfig
from llmroute.errors import InvalidRequest, Overloaded, PermissionDenied
from llmroute.policy.keys import ApiKey
from llmroute.policy.priority_metrics import PriorityMetrics

HEADER = "x-llmroute-priority"
EWMA_ALPHA = 0.2


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """A class: ``name``, ``rank`` (0 = highest), TTFT target and end-to-end target (seconds;
    None: none)."""

    name: str
    rank: int
    ttft_target_s: float
    e2e_target_s: float | None = None


@dataclass(eq=False)
class Waiter:
    """A queued request: its ``klass``, ``arrived`` (clock s) and the future granting it."""

    klass: PriorityClass
    arrived: float
    seq: int
    granted: asyncio.Future[None] = field(repr=False)

    @property
    def deadline(self) -> float:
        """When its first token is due (clock s)."""
        return self.arrived + self.klass.ttft_target_s

    @property
    def order(self) -> tuple[int, float, int]:
        """Queue order: class rank, then deadline (EDF), then arrival sequence."""
        return (self.klass.rank, self.deadline, self.seq)


class AdmissionQueue:
    """Waiters sorted by ``Waiter.order`` (head: served next; tail: shed first), at most
    ``max_len`` of them. Plain list + bisect: the bound keeps it small."""

    def __init__(self, max_len: int):
        self.max_len = max_len
        self._items: list[Waiter] = []

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Waiter]:
        return iter(self._items)

    def ahead_of(self, w: Waiter) -> int:
        """How many waiters would be served before ``w``."""
        return bisect.bisect_left(self._items, w.order, key=lambda x: x.order)

    def push(self, w: Waiter) -> Waiter | None:
        """Queue ``w``; when full, the one shed to make room (``w`` itself when it is the
        worst, then it is not queued), else None."""
        if len(self._items) >= self.max_len:
            if w.order > self._items[-1].order:
                return w
            shed = self._items.pop()
        else:
            shed = None
        bisect.insort(self._items, w, key=lambda x: x.order)
        return shed

    def pop(self) -> Waiter:
        """The head (raises IndexError when empty)."""
        return self._items.pop(0)

    def remove(self, w: Waiter) -> bool:
        """Take ``w`` out; False when it was not queued."""
        try:
            self._items.remove(w)
        except ValueError:
            return False
        return True

    def expired(self, before: float) -> list[Waiter]:
        """Remove and return the waiters that arrived before ``before``."""
        old = [w for w in self._items if w.arrived < before]
        for w in old:
            self._items.remove(w)
        return old


def build_classes(config: PriorityConfig) -> tuple[dict[str, PriorityClass], PriorityClass]:
    """The configured classes by name, and the default one (``default_class``, else
    ``standard`` when configured, else the lowest). Raises ValueError with no classes."""
    classes = {c.name: PriorityClass(c.name, i, c.ttft_target_s, c.e2e_target_s)
               for i, c in enumerate(config.classes)}
    if not classes:
        raise ValueError("no priority classes configured")
    name = config.default_class or ("standard" if "standard" in classes else config.classes[-1].name)
    return classes, classes[name]


class Slot:
    """An admitted request's place: ``first_token()`` when its first token leaves (SLO
    attainment, timed from ``arrived``: the wait counts), ``done()`` once when it ends (its
    place goes to the next waiter; the hold time is timed from ``granted``: the wait does
    not count). Times in clock seconds."""

    __slots__ = ("_gate", "klass", "arrived", "granted", "_first", "_done")

    def __init__(self, gate: PriorityGate, klass: PriorityClass, arrived: float,
                 granted: float):
        self._gate, self.klass, self.arrived, self.granted = gate, klass, arrived, granted
        self._first = self._done = False

    def first_token(self) -> None:
        """Record the time to first token against the class's target (once)."""
        if not self._first:
            self._first = True
            self._gate.metrics.ttft(self.klass, self._gate.clock() - self.arrived)

    def done(self) -> None:
        """Free the place (once)."""
        if not self._done:
            self._done = True
            self._gate.release(self)

    def watch(self, stream: AsyncIterator[bytes]) -> Watched:
        """``stream`` unchanged; its first chunk is the first token, its end frees the place."""
        return Watched(stream, self)


class Watched:
    """An SSE byte stream passed through; the slot learns its first chunk and is done when
    the stream ends, fails or is closed (also when closed unread)."""

    __slots__ = ("_stream", "_slot")

    def __init__(self, stream: AsyncIterator[bytes], slot: Slot):
        self._stream, self._slot = stream, slot

    def __aiter__(self) -> Watched:
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await anext(self._stream)
        except BaseException:
            self._slot.done()
            raise
        self._slot.first_token()
        return data

    async def aclose(self) -> None:
        """Close the stream (and its upstream request), then free the place."""
        try:
            await self._stream.aclose()  # type: ignore[attr-defined]
        finally:
            self._slot.done()


class PriorityGate:
    """Admission by class (module docstring). ``headroom()``: requests the fleet can take
    now (≤ 0: saturated); ``capacity``: the most slots held at once (the fleet's in-flight
    watermarks summed); ``clock``/``sleep``: monotonic seconds."""

    def __init__(self, config: PriorityConfig, headroom: Callable[[], int], capacity: int,
                 metrics: PriorityMetrics, clock: Callable[[], float],
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.classes, self.default = build_classes(config)
        self._config, self._headroom, self._capacity = config, headroom, capacity
        self.metrics, self.clock, self._sleep = metrics, clock, sleep
        self.queue = AdmissionQueue(config.max_queue)
        self.active = 0
        self._hold_s: float | None = None  # EWMA of how long a slot is held
        self._seq = itertools.count()
        self._ticker: asyncio.Task[None] | None = None

    def classify(self, key: ApiKey | None, headers: Mapping[str, str]) -> PriorityClass:
        """The class of a request by ``key`` (None: auth off) with these ``headers``.
        Raises InvalidRequest (400) when the header names no class, PermissionDenied (403)
        when the key may not choose."""
        asked = headers.get(HEADER)
        if asked is None:
            return self.default if key is None else self.classes.get(key.priority, self.default)
        klass = self.classes.get(asked.strip().lower())
        if klass is None:
            raise InvalidRequest(f"{HEADER}: {asked[:64]!r} is not a priority class; the "
                                 f"classes are {', '.join(self.classes)}",
                                 param=HEADER, code="invalid_priority")
        allowed = (self._config.header_without_auth if key is None
                   else key.metadata.get("priority_header") is True)
        if not allowed:
            raise PermissionDenied(f"key {key.display if key else ''} may not choose its "
                                   f"priority class ({HEADER})", param=HEADER,
                                   code="priority_not_allowed")
        return klass

    def room(self) -> bool:
        """Whether one more request may start now."""
        return self.active < self._capacity and self._headroom() > 0

    def enter_now(self, klass: PriorityClass) -> Slot | None:
        """A place for a request of ``klass`` at once, or None when it would have to wait
        (nothing is queued for it)."""
        if self.queue or not self.room():
            return None
        now = self.clock()
        self.active += 1
        return self._slot(klass, now, now)

    async def enter(self, klass: PriorityClass) -> Slot:
        """A place for a request of ``klass``, at once or after waiting. Raises Overloaded
        (503, ``retry_after_s`` set): shed, deadline unmeetable, or waited too long."""
        slot = self.enter_now(klass)
        if slot is not None:
            return slot
        now = self.clock()
        w = Waiter(klass, now, next(self._seq), asyncio.get_running_loop().create_future())
        self._admit_to_queue(w)
        try:
            await w.granted
        except BaseException:
            if self.queue.remove(w):  # cancelled while waiting: the client left
                self.metrics.left(klass)
                self.metrics.queued(self.queue)
            elif w.granted.done() and not w.granted.cancelled() and w.granted.exception() is None:
                self._free()  # granted, then cancelled before it resumed: give it back
            raise
        return self._slot(klass, now, self.clock())

    def _admit_to_queue(self, w: Waiter) -> None:
        wait = self._expected_wait(self.queue.ahead_of(w) + 1)
        if wait is not None and wait > w.klass.ttft_target_s:
            self.metrics.shed(w.klass, "deadline_unmeetable")
            raise Overloaded(f"The fleet is saturated: a {w.klass.name} request would wait "
                             f"about {wait:.1f} s, over its {w.klass.ttft_target_s:g} s "
                             "target.", retry_after_s=wait, code="deadline_unmeetable")
        shed = self.queue.push(w)
        if shed is w:
            self.metrics.shed(w.klass, "queue_full")
            raise Overloaded(self._shed_message(w), retry_after_s=self._retry_after(),
                             code="queue_full")
        if shed is not None:
            self.metrics.shed(shed.klass, "queue_full")
            shed.granted.set_exception(Overloaded(self._shed_message(shed), code="queue_full",
                                                  retry_after_s=self._retry_after()))
        self.metrics.queued(self.queue)
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._tick())

    def _slot(self, klass: PriorityClass, arrived: float, now: float) -> Slot:
        self.metrics.waited(klass, now - arrived)
        return Slot(self, klass, arrived, now)

    def release(self, slot: Slot) -> None:
        """A slot is done: learn how long it was held (from its grant: a place is busy
        while a request runs, not while it queued), let waiters in."""
        held = self.clock() - slot.granted
        self._hold_s = held if self._hold_s is None else (
            self._hold_s + EWMA_ALPHA * (held - self._hold_s))
        self._free()

    def _free(self) -> None:
        self.active -= 1
        self.pump()

    def pump(self) -> None:
        """Grant the head waiters while there is room; drop those that waited too long."""
        for w in self.queue.expired(self.clock() - self._config.max_wait_s):
            self.metrics.shed(w.klass, "queue_timeout")
            w.granted.set_exception(Overloaded(
                f"The fleet stayed saturated for {self._config.max_wait_s:g} s.",
                retry_after_s=self._retry_after(), code="queue_timeout"))
        granted = 0
        while self.queue and self.active + granted < self._capacity and \
                self._headroom() - granted > 0:
            self.queue.pop().granted.set_result(None)
            granted += 1
        self.active += granted  # the granted waiters' places, taken now
        self.metrics.queued(self.queue)

    async def _tick(self) -> None:
        while self.queue:
            await self._sleep(self._config.tick_s)
            self.pump()

    def _expected_wait(self, places: int) -> float | None:
        """Seconds until ``places`` slots free up (None before any slot was seen end)."""
        if self._hold_s is None:
            return None
        return places * self._hold_s / max(self._capacity, 1)

    def _retry_after(self) -> float:
        return max(1.0, self._expected_wait(len(self.queue) + 1) or 1.0)

    def _shed_message(self, w: Waiter) -> str:
        return (f"The fleet is saturated and the admission queue is full: this "
                f"{w.klass.name} request was shed for higher-priority work.")

