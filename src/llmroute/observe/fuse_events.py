"""Fuse events in SQLite: one row per handoff or dead end (request id, backend, reason, the
entropy window, wall-clock time), for ``GET /debug/fuse`` (counts per backend per hour, the
heatmap, and recent events with their entropy curves).

The stdlib ``sqlite3`` runs in worker threads (``asyncio.to_thread``) so the event loop never
waits on the disk; one connection, opened on first use, serialised by a lock.
``path=":memory:"`` keeps events for the process's lifetime only.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

_SCHEMA = """CREATE TABLE IF NOT EXISTS fuse_events (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, request_id TEXT NOT NULL,
    backend TEXT NOT NULL, to_backend TEXT, reason TEXT NOT NULL, kind TEXT NOT NULL,
    at_token INTEGER NOT NULL, window TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS fuse_events_at ON fuse_events (at)"""


@dataclass(frozen=True, slots=True)
class FuseEvent:
    """One fuse event: ``kind`` is ``handoff`` (``to_backend`` continued the stream) or
    ``dead_end`` (nothing could; the stream ended with an error event); ``at`` is wall-clock
    seconds since the epoch; ``at_token`` tokens had been streamed; ``window`` holds the
    recent per-token entropies in nats."""

    at: float
    request_id: str
    backend: str
    reason: str
    kind: str
    at_token: int
    window: tuple[float, ...] = ()
    to_backend: str | None = None


class FuseEventStore:
    """Append and query fuse events in the SQLite database at ``path``."""

    def __init__(self, path: str = ":memory:"):
        self._path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    async def add(self, event: FuseEvent) -> None:
        """Store ``event``. Raises sqlite3.Error when the database cannot be written."""
        row = (event.at, event.request_id, event.backend, event.to_backend, event.reason,
               event.kind, event.at_token, json.dumps([round(h, 4) for h in event.window]))
        await asyncio.to_thread(self._run, "INSERT INTO fuse_events (at, request_id, backend, "
                                "to_backend, reason, kind, at_token, window) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)

    async def hourly(self, since: float) -> list[dict[str, Any]]:
        """Counts since ``since`` (epoch s): ``[{backend, hour (epoch s), reason, count}]``."""
        rows = await asyncio.to_thread(
            self._run, "SELECT backend, CAST(at / 3600 AS INTEGER) * 3600, reason, COUNT(*) "
            "FROM fuse_events WHERE at >= ? GROUP BY 1, 2, 3 ORDER BY 2, 1, 3", (since,))
        return [{"backend": b, "hour": h, "reason": r, "count": n} for b, h, r, n in rows]

    async def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` events, newest first, each with its entropy ``window``."""
        rows = await asyncio.to_thread(
            self._run, "SELECT at, request_id, backend, to_backend, reason, kind, at_token, "
            "window FROM fuse_events ORDER BY id DESC LIMIT ?", (limit,))
        keys = ("at", "request_id", "backend", "to_backend", "reason", "kind", "at_token")
        return [{**dict(zip(keys, r[:7], strict=True)), "window": json.loads(r[7])}
                for r in rows]

    def close(self) -> None:
        """Close the connection (a later call reopens it)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _run(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(self._path, check_same_thread=False)
                self._conn.executescript(_SCHEMA)
            with self._conn:
                return self._conn.execute(sql, params).fetchall()
