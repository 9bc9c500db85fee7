"""Finished traces in SQLite (``observe.trace_store`` in the config; off by default), so
``GET /trace/{id}`` and ``llmroute trace`` find a trace after it has left the in-memory ring
or the router has restarted.

Written off the request path (``writer.QueuedWriter``: a bounded queue, batches in a
writer thread, each trace encoded there); bounded: at most ``max_traces`` rows and none older than
``retention_days``, pruned after every ``PRUNE_EVERY`` (or ``max_traces``, when fewer)
written traces. A repeated request
id keeps the newest trace. A disk error drops the batch, counts it
(``llmroute_trace_store_failures_total``) and is logged once per change of state.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

import orjson
import structlog
from prometheus_client import Counter

from llmroute.config.observe import TraceStoreConfig
from llmroute.observe.trace import Trace
from llmroute.observe.writer import QueuedWriter

PRUNE_EVERY = 1000
log = structlog.get_logger("llmroute.trace_store")
_SCHEMA = ("CREATE TABLE IF NOT EXISTS traces (request_id TEXT PRIMARY KEY, at REAL NOT NULL,"
           " body BLOB NOT NULL)", "CREATE INDEX IF NOT EXISTS traces_at ON traces(at)")


def connect(path: str) -> sqlite3.Connection:
    """Open (creating) the trace database at ``path``. Raises sqlite3.Error or OSError."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for sql in _SCHEMA:
        conn.execute(sql)
    return conn


def read(path: str, request_id: str) -> Trace | None:
    """The stored trace of ``request_id`` in the database at ``path`` (None: not there, or
    no such database). Raises sqlite3.Error for a file that is not such a database."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.OperationalError:
        return None
    try:
        row = conn.execute("SELECT body FROM traces WHERE request_id = ?",
                           (request_id,)).fetchone()
    finally:
        conn.close()
    return None if row is None else Trace.from_json(orjson.loads(row[0]))


class TraceStore(QueuedWriter):
    """Keeps finished traces in the SQLite database ``config.path``; ``dropped`` /
    ``failures`` count traces dropped (full queue) and batches refused (disk errors)."""

    def __init__(self, config: TraceStoreConfig, dropped: Counter, failures: Counter):
        super().__init__(config.queue, dropped)
        assert config.path is not None
        self.path, self._config, self._failures = config.path, config, failures
        self._failing = False
        self._since_prune = 0

    def put(self, trace: Trace) -> None:
        """Queue ``trace`` for writing; never waits."""
        self.submit(trace)  # encoded in the writer thread

    async def get(self, request_id: str) -> Trace | None:
        """The stored trace of ``request_id`` (None: unknown, or the store unreadable)."""
        try:
            return await asyncio.to_thread(read, self.path, request_id)
        except sqlite3.Error as err:
            log.warning("trace_store_read_failed", path=self.path, error=str(err))
            return None

    def _write(self, batch: list[Trace], missing: int) -> bool:
        rows = [(t.request_id, t.at, orjson.dumps(t.to_json())) for t in batch]
        try:
            conn = self._conn = self._conn or connect(self.path)
            with conn:
                conn.execute("BEGIN")
                conn.executemany("INSERT OR REPLACE INTO traces VALUES (?, ?, ?)", rows)
            self._prune(conn, len(rows))
        except (sqlite3.Error, OSError) as err:
            self._failures.inc()
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._state(False, str(err))
            return False
        self._state(True, "")
        return True

    def _prune(self, conn: sqlite3.Connection, written: int) -> None:
        c = self._config
        self._since_prune += written
        if self._since_prune < min(PRUNE_EVERY, c.max_traces):
            return
        self._since_prune = 0
        if c.retention_days is not None:
            conn.execute("DELETE FROM traces WHERE at < ?",
                         (time.time() - c.retention_days * 86400.0,))
        conn.execute("DELETE FROM traces WHERE request_id IN (SELECT request_id FROM traces "
                     "ORDER BY at DESC LIMIT -1 OFFSET ?)", (c.max_traces,))

    def _state(self, ok: bool, error: str) -> None:
        if ok and self._failing:
            log.info("trace_store_write_recovered", path=self.path)
        elif not ok and not self._failing:
            log.error("trace_store_write_failed", path=self.path, error=error)
        self._failing = not ok
