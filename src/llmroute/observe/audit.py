"""The decision audit's writer: one record per request, written off the request path.

``add`` queues the finished trace (a tuple: the record is built in the writer thread) and
``submit`` a ready record; both return at once, and when the queue is full the record is
dropped and counted (``llmroute_audit_dropped_total``) — a request never waits on the
audit. The writer thread (``writer.QueuedWriter``) builds the records of a batch, chains
them (canonical JSON + SHA-256 each) and inserts them in one transaction
(``audit_chain.py``; WAL journal, ``synchronous=NORMAL``). When the database cannot be
opened or written (missing directory, read-only file, full disk) the batch is dropped,
counted (``llmroute_audit_failures_total``) and logged once per change of state; once
writing works again a ``gap`` record says how many decisions are missing. Retention
(days) prunes the oldest records once an hour, at write time.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable
from typing import Any

import structlog
from prometheus_client import Counter

from llmroute.observe import audit_chain
from llmroute.observe.trace import Trace
from llmroute.observe.writer import QueuedWriter

PRUNE_EVERY_S = 3600.0
_NOT_DECISIONS = frozenset(("receive", "response"))
log = structlog.get_logger("llmroute.audit")


class AuditLog(QueuedWriter):
    """Append decision records to the SQLite hash chain at ``path``; ``retention_days``
    (None: keep all); ``queue_size`` records may wait; ``dropped``/``failures`` count the
    records dropped and batches refused. ``submit`` a record (JSON-ready, with ``at`` and
    ``request_id``) or ``add`` a finished trace; ``flush``/``close`` as ``QueuedWriter``'s."""

    def __init__(self, path: str, retention_days: float | None, queue_size: int,
                 dropped: Counter, failures: Counter):
        super().__init__(queue_size, dropped)
        self.path, self._retention = path, retention_days
        self._failures = failures
        self._failing = False
        self._pruned_at = 0.0

    def add(self, trace: Trace, prompt: str | None, answer: str | None, router: str,
            config_sha256: str | None) -> None:
        """Queue the decision record of ``trace`` (``audit_record``, with the digests of
        ``prompt`` and ``answer`` and the provenance fields), built in the writer thread."""
        self.submit((trace, prompt, answer, router, config_sha256))

    def _write(self, batch: list[Any], missing: int) -> bool:
        """Append ``batch`` (after a ``gap`` record when ``missing`` decisions were lost);
        on a disk error drop it, count it, log the change of state and return False."""
        # fresh dicts each (a submitted record is copied), so the chain may set their prev
        batch = [dict(item) if isinstance(item, dict) else _from_trace(*item)
                 for item in batch]
        try:
            conn = self._conn = self._conn or audit_chain.connect(self.path)
            gap = [{"kind": "gap", "at": batch[0]["at"], "request_id": "",
                    "dropped": missing}] if missing else []
            audit_chain.append(conn, gap + batch, owned=True)
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


def _from_trace(trace: Trace, prompt: str | None, answer: str | None, router: str | None,
                config_sha256: str | None) -> dict[str, Any]:
    """``audit_record(trace, router=…, config_sha256=…, prompt_sha256=…, answer_sha256=…)``
    with the digests of ``prompt`` and ``answer``, built without the keyword round trip
    (this runs once per request in the writer thread)."""
    return _provenance(_decision(trace), (
        ("router", router), ("config_sha256", config_sha256),
        ("prompt_sha256", sha256_text(prompt)), ("answer_sha256", sha256_text(answer))))


def audit_record(trace: Trace, **provenance: str | None) -> dict[str, Any]:
    """The decision fields of ``trace`` that the audit keeps: ids, time, status, the
    summary (tenant, key, intent, strategy, pool, backend, tokens, handoffs), the decision
    steps (policy, gate, strategy, anchor, attempts, handoffs) and the ``provenance``
    fields given (``router``, ``config_sha256``, ``prompt_sha256``, ``answer_sha256``: hex
    digests, never the texts; None ones are left out)."""
    return _provenance(_decision(trace), provenance.items())


def _provenance(rec: dict[str, Any], fields: Iterable[tuple[str, str | None]]
                ) -> dict[str, Any]:
    """``rec`` with each of ``fields`` that is not None added; returns ``rec``."""
    for key, value in fields:
        if value is not None:
            rec[key] = value
    return rec


def _decision(trace: Trace) -> dict[str, Any]:
    """A new dict of ``trace``'s decision fields (``audit_record`` without provenance)."""
    return {"request_id": trace.request_id, "trace_id": trace.trace_id, "at": trace.at,
            "status": trace.status, **trace.summary,
            "steps": [s.to_json() for s in trace.steps if s.name not in _NOT_DECISIONS]}


def sha256_text(text: str | None) -> str | None:
    """SHA-256 (hex) of ``text``'s UTF-8 bytes; None for None."""
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()
