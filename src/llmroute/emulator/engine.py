"""The emulated engine at run time: the scheduler driven in (scaled) real time.

A loop plans a step, sleeps until that step's end in wall time (model seconds ×
``time_scale``), then applies it and wakes the requests that have new tokens. Steps run
back to back while there is work, on a virtual model clock: if the process falls behind wall
time, steps run without sleeping until it has caught up, so the model's timings (and the
``/metrics`` histograms) stay exact while tokens reach clients late. An idle engine's clock
jumps to the current time when the next request arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from llmroute.blocks import block_hashes
from llmroute.emulator.kv_publish import KvEventPublisher
from llmroute.emulator.gpu import DcgmView, GpuState
from llmroute.emulator.metrics import EngineMetrics
from llmroute.emulator.scheduler import Rejection, Sequence, TokenEvent
from llmroute.emulator.spec import EngineSpec


@dataclass(eq=False)
class Handle:
    """One request's view of the engine: ``generated`` tokens so far, ``finished``, and an
    event set whenever there is something new to stream (every ``stream_interval`` tokens,
    the first token and the last)."""

    seq_id: str
    prompt_tokens: int
    max_tokens: int
    generated: int = 0
    finished: bool = False
    notified: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    async def updates(self) -> AsyncIterator[int]:
        """Yield the number of new tokens each time some arrive, until the request ends —
        every token exactly once, even when more arrived, or the request finished, while
        the consumer was still busy with the previous update (a slow client or link:
        ``cues.py``)."""
        sent = 0
        while True:
            if not self.finished:
                await self.wake.wait()
            self.wake.clear()
            new = self.generated - sent
            if new > 0:
                yield new
                sent += new  # not ``self.generated``: it may have grown during the yield
            if self.finished and sent >= self.generated:
                return


class EmulatedEngine:
    """One engine: scheduler, metrics and the step loop (``run`` as a task); with
    ``spec.kv_events`` its prefix cache's events go out on a ZeroMQ PUB socket
    (``publisher``, bound here; closed when ``running`` ends). Raises zmq.ZMQError when
    that endpoint cannot be bound."""

    def __init__(self, spec: EngineSpec, clock: Callable[[], float] = time.monotonic):
        self.spec = spec
        self.scheduler = spec.scheduler()
        self.metrics = EngineMetrics(self.scheduler, spec.model_name)
        self.gpu = GpuState(self.scheduler.perf, self.scheduler, spec.cues)
        self.dcgm = DcgmView(self.gpu, self.scheduler.perf, self.model_time, spec.model_name)
        self._clock = clock
        self._wall0 = clock()
        self._model_now = 0.0
        self._handles: dict[str, Handle] = {}
        self._work = asyncio.Event()
        self._ids = itertools.count()
        self.loop_task: asyncio.Task[None] | None = None
        self.publisher = KvEventPublisher(spec.kv_events) if spec.kv_events else None

    def alive(self) -> bool:
        """True while the step loop runs (``/health`` answers 503 otherwise)."""
        return self.loop_task is not None and not self.loop_task.done()

    def model_time(self) -> float:
        """The current wall time in model seconds since the engine started."""
        return (self._clock() - self._wall0) / self.spec.time_scale

    def submit(self, prompt_tokens: int, max_tokens: int, hashes: tuple[int, ...] = ()
               ) -> Handle | Rejection:
        """Queue a request (``hashes``: its prompt's block hashes, for the prefix cache);
        returns its Handle, or the Rejection when it cannot be served."""
        seq_id = f"seq-{next(self._ids)}"
        seq = Sequence(seq_id, prompt_tokens, max_tokens, self.model_time(), hashes=hashes)
        if self.scheduler.idle():  # an idle engine's clock starts again at this arrival
            self._model_now = max(self._model_now, seq.arrival)
        rejection = self.scheduler.add(seq)
        if rejection is not None:
            return rejection
        handle = Handle(seq_id, prompt_tokens, max_tokens)
        self._handles[seq_id] = handle
        self._work.set()
        return handle

    def prompt_hashes(self, text: str) -> tuple[int, ...]:
        """The chained hashes of ``text``'s full blocks at this engine's block size
        (``blocks.py``); empty without prefix caching."""
        if self.scheduler.cache is None:
            return ()
        return tuple(block_hashes(text, self.spec.block_size))

    def abort(self, handle: Handle) -> None:
        """Forget a request whose client went away (frees its KV blocks)."""
        if self._handles.pop(handle.seq_id, None) is not None:
            self.scheduler.abort(handle.seq_id)

    async def run(self) -> None:
        """The step loop; runs until cancelled."""
        while True:
            if self.scheduler.idle():
                self._work.clear()
                await self._work.wait()
            batch = self.scheduler.schedule(self._model_now)
            if batch is None:  # waiting requests that cannot start: nothing to do yet
                self._work.clear()
                await self._work.wait()
                continue
            await self._sleep_until(batch.end)
            self._model_now = batch.end
            self.gpu.step(batch)
            events = self.scheduler.complete(batch)
            self.metrics.record(events, batch.duration)
            self._deliver(events)
            self._publish()

    def _publish(self) -> None:
        """Hand the step's KV-cache events to the publisher (dropped without one)."""
        cache = self.scheduler.cache
        if cache is not None and cache.events:
            events = cache.take_events()
            if self.publisher is not None:
                self.publisher.publish(events)

    async def _sleep_until(self, model_t: float) -> None:
        delay = self._wall0 + model_t * self.spec.time_scale - self._clock()
        await asyncio.sleep(max(delay, 0.0))

    def _deliver(self, events: list[TokenEvent]) -> None:
        interval = self.spec.stream_interval
        for e in events:
            handle = self._handles.get(e.seq_id)
            if handle is None:
                continue
            handle.generated = e.generated
            if e.finished:
                handle.finished = True
                del self._handles[e.seq_id]
            if e.first or e.finished or e.generated - handle.notified >= interval:
                handle.notified = e.generated
                handle.wake.set()


@contextlib.asynccontextmanager
async def running(engine: EmulatedEngine) -> AsyncIterator[EmulatedEngine]:
    """Run ``engine``'s step loop while the block runs; re-raises the loop's error, if it
    failed, on the way out."""
    task = engine.loop_task = asyncio.create_task(engine.run())
    try:
        yield engine
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if engine.publisher is not None:
            engine.publisher.close()
