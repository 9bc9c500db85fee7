"""A writer off the request path: ``submit`` puts a record on a bounded asyncio queue and
returns at once (a full queue drops the record and counts it); a background task (started
by the first ``submit``) takes what is queued, up to ``BATCH`` records, and hands them to
the subclass's ``_write`` in a worker thread (``asyncio.to_thread``). The decision audit
(``audit.py``) and the trace store (``trace_store.py``) write through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import Any

from prometheus_client import Counter

BATCH = 256


class QueuedWriter:
    """Queue records for ``_write`` (override it); ``queue_size`` records may wait;
    ``dropped`` counts the records dropped when the queue is full. ``_conn`` is the
    subclass's database, closed by ``close``."""

    def __init__(self, queue_size: int, dropped: Counter):
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(queue_size)
        self._dropped = dropped
        self._conn: sqlite3.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._missing = 0  # records lost since the last good write

    def submit(self, record: dict[str, Any]) -> None:
        """Queue ``record`` (JSON-ready); never waits."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())
        try:
            self._queue.put_nowait(record)
        except asyncio.QueueFull:
            self._missing += 1
            self._dropped.inc()

    async def flush(self) -> None:
        """Wait until every queued record has been written (or dropped)."""
        if self._task is not None:
            await self._queue.join()

    async def close(self) -> None:
        """Write what is queued, stop the writer and close the database."""
        await self.flush()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._conn is not None:
            await asyncio.to_thread(self._conn.close)
            self._conn = None

    def _write(self, batch: list[dict[str, Any]], missing: int) -> bool:
        """Write ``batch`` (``missing`` records were lost before it); False when it could
        not be written. Runs in a worker thread."""
        raise NotImplementedError

    async def _drain(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            missing = self._missing  # touched on the loop only
            try:
                ok = await asyncio.to_thread(self._write, batch, missing)
                self._missing += -missing if ok else len(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()
