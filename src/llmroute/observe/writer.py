"""A writer off the request path, in its own thread. ``submit`` puts an item on a
``queue.SimpleQueue`` (C, lock-free for the caller, no event-loop wake-up) and returns at
once; when ``queue_size`` items already wait the item is dropped and counted. The writer
thread (started by the first ``submit``) wakes once per batch: it takes an item, waits
``LINGER_S`` for more to gather, then hands everything queued to the subclass's ``_write``
(one transaction). Turning an item into its stored form (JSON, hashes) is ``_write``'s
work, so the event loop pays for one tuple and one ``put`` per request. The decision audit
(``audit.py``) and the trace store (``trace_store.py``) write through it.

Cost (``bench/observe_cost.py``): the loop's share is ``submit`` (~1 µs); the thread's
share, per record, is the subclass's encoding and SQLite insert, amortised over batches.
A crash loses what was queued (at most ``queue_size`` items, ~``LINGER_S`` of traffic).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import sqlite3
import threading
import time
from typing import Any

import structlog
from prometheus_client import Counter

log = structlog.get_logger("llmroute.writer")
LINGER_S = 0.05
"""How long the writer waits after the first item of a batch for more to gather (s): one
thread wake-up and one transaction per ``LINGER_S`` instead of per request."""


class _Marker:
    """A ``flush`` (or, with ``stop``, a ``close``) request in the queue: resolved once
    everything queued before it is written."""

    __slots__ = ("done", "stop")

    def __init__(self, stop: bool):
        self.done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.stop = stop


class QueuedWriter:
    """Queue items for ``_write`` (override it; it runs in the writer thread and owns
    ``_conn``, the subclass's database, closed by ``close``); ``queue_size`` items may wait;
    ``dropped`` counts the items dropped when that many already wait."""

    def __init__(self, queue_size: int, dropped: Counter):
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._size, self._dropped = queue_size, dropped
        self._conn: sqlite3.Connection | None = None
        self._thread: threading.Thread | None = None
        # Each counter is written by one thread only: the loop counts what it queued and
        # dropped, the writer what it took off the queue and what it could not write.
        self._queued = self._refused = 0  # loop
        self._taken = self._reported = self._lost = 0  # writer

    def submit(self, item: Any) -> None:
        """Queue ``item`` (whatever ``_write`` takes); never waits."""
        if self._queued - self._taken >= self._size:
            self._refused += 1
            self._dropped.inc()
            return
        self._queued += 1
        self._queue.put(item)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=type(self).__name__,
                                            daemon=True)
            self._thread.start()

    async def flush(self) -> None:
        """Wait until every item queued so far has been written (or dropped)."""
        if self._thread is not None:
            await self._mark(stop=False)

    async def close(self) -> None:
        """Write what is queued, close the database and stop the writer thread (a later
        ``submit`` starts a new one)."""
        if self._thread is not None:
            await self._mark(stop=True)
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    def _write(self, batch: list[Any], missing: int) -> bool:
        """Write ``batch`` (``missing`` items were lost before it); False when it could not
        be written. Runs in the writer thread."""
        raise NotImplementedError

    async def _mark(self, stop: bool) -> None:
        marker = _Marker(stop)
        self._queue.put(marker)
        await asyncio.wrap_future(marker.done)

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            if not isinstance(items[0], _Marker):
                time.sleep(LINGER_S)
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batch = [i for i in items if not isinstance(i, _Marker)]
            if batch:
                self._commit(batch)
            markers = [i for i in items if isinstance(i, _Marker)]
            stop = any(m.stop for m in markers)
            if stop and self._conn is not None:
                self._conn.close()
                self._conn = None
            for m in markers:
                m.done.set_result(None)
            if stop:
                return

    def _commit(self, batch: list[Any]) -> None:
        refused = self._refused
        try:
            ok = self._write(batch, refused - self._reported + self._lost)
        except Exception:  # a bad item must not stop the thread (flush would never return)
            log.exception("writer_batch_failed", writer=type(self).__name__)
            ok = False
        if ok:
            self._reported, self._lost = refused, 0
        else:
            self._lost += len(batch)
        self._taken += len(batch)
