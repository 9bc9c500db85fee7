"""The decision audit's writer: one record per request, written off the request path.

``submit`` puts a record on a bounded asyncio queue and returns at once; when the queue is
full the record is dropped and counted (``llmroute_audit_dropped_total``) — a request never
waits on the audit. A background task (started by the first ``submit``) takes what is
queued, up to ``writer.BATCH`` records, and appends them to the hash chain in a worker thread
(``asyncio.to_thread``; ``audit_chain.py``). When the database cannot be opened or written
(missing directory, read-only file, full disk) the batch is dropped, counted
(``llmroute_audit_failures_total``) and logged once per change of state; once writing works
again a ``gap`` record says how many decisions are missing. Retention (days) prunes the
oldest records once an hour, at write time.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import structlog
from prometheus_client import Counter

from llmroute.observe import audit_chain
from llmroute.observe.writer import QueuedWriter
PRUNE_EVERY_S = 3600.0
log = structlog.get_logger("llmroute.audit")


class AuditLog(QueuedWriter):
    """Append decision records to the SQLite hash chain at ``path``; ``retention_days``
    (None: keep all); ``queue_size`` records may wait; ``dropped``/``failures`` count the
    records dropped and batches refused. ``submit`` a record (JSON-ready, with ``at`` and
    ``request_id``); ``flush``/``close`` as ``QueuedWriter``'s."""

    def __init__(self, path: str, retention_days: float | None, queue_size: int,
                 dropped: Counter, failures: Counter):
        super().__init__(queue_size, dropped)
        self.path, self._retention = path, retention_days
        self._failures = failures
        self._failing = False
        self._pruned_at = 0.0

    def _write(self, batch: list[dict[str, Any]], missing: int) -> bool:
        """Append ``batch`` (after a ``gap`` record when ``missing`` decisions were lost);
        on a disk error drop it, count it, log the change of state and return False."""
        try:
            conn = self._conn = self._conn or audit_chain.connect(self.path)
            gap = [{"kind": "gap", "at": batch[0]["at"], "request_id": "",
                    "dropped": missing}] if missing else []
            audit_chain.append(conn, gap + batch)
            self._prune(conn, batch[-1]["at"])
        except (sqlite3.Error, OSError) as err:
            self._failures.inc()
            self._conn = None if self._conn is None else _close(self._conn)
            if not self._failing:
                self._failing = True
                log.error("audit_write_failed", path=self.path, error=str(err))
            return False
        if self._failing:
            self._failing = False
            log.info("audit_write_recovered", path=self.path)
        return True

    def _prune(self, conn: sqlite3.Connection, now: float) -> None:
        if self._retention is None or now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        audit_chain.prune(conn, now - self._retention * 86400.0)


def _close(conn: sqlite3.Connection) -> None:
    conn.close()
