"""Micro-batching: concurrent callers share one encoder call, run off the event loop.

``MicroBatcher(fn, max_wait_ms, max_batch, executor)``: ``await submit(text)`` queues
``text``; one drain task per burst waits up to ``max_wait_ms`` for company (only when the
encoder is idle), then hands up to ``max_batch`` queued texts to ``fn`` in ``executor`` (a
worker thread). Texts that arrive while a batch runs wait for it and go together in the next
one, so a burst of N callers costs about ⌈N / max_batch⌉ + 1 encoder calls, not N.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor

import numpy as np

EncodeFn = Callable[[Sequence[str]], np.ndarray]


class MicroBatcher:
    """Batches ``submit`` calls into ``fn(texts) -> (n, d)`` calls (see the module docstring).

    ``fn``'s exceptions reach every caller of the failed batch; cancelling one caller does
    not cancel the batch. ``batches`` counts encoder calls (for tests and benchmarks).
    """

    def __init__(self, fn: EncodeFn, *, max_wait_ms: float, max_batch: int,
                 executor: Executor) -> None:
        self._fn = fn
        self._wait_s = max(max_wait_ms, 0.0) / 1000.0
        self._max_batch = max_batch
        self._executor = executor
        self._queue: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        self._drain: asyncio.Task[None] | None = None
        self.batches = 0

    async def submit(self, text: str) -> np.ndarray:
        """The embedding row of ``text`` (shape ``(d,)``). Raises what ``fn`` raised."""
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._queue.append((text, future))
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._run())
        return await asyncio.shield(future)

    async def _run(self) -> None:
        """Drain the queue batch by batch; the first batch waits ``max_wait_ms`` for company."""
        if self._wait_s and len(self._queue) < self._max_batch:
            await asyncio.sleep(self._wait_s)
        while self._queue:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
            await self._encode(batch)

    async def _encode(self, batch: list[tuple[str, asyncio.Future[np.ndarray]]]) -> None:
        loop = asyncio.get_running_loop()
        self.batches += 1
        try:
            rows = await loop.run_in_executor(self._executor, self._fn, [t for t, _ in batch])
        except Exception as err:  # noqa: BLE001 - re-raised in each caller of the batch
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(err)
            return
        for (_, fut), row in zip(batch, rows, strict=True):
            if not fut.done():
                fut.set_result(row)
