"""The hand-off queue of the ``human`` kind: one ticket per request a person must answer.

Tickets live in SQLite (``strategies.handoffs_path``; ``:memory:`` keeps them for the
process's lifetime). The stdlib ``sqlite3`` runs in worker threads (``asyncio.to_thread``)
on one connection, opened on first use and serialised by a lock, in WAL mode so the
``llmroute handoffs`` commands can read and answer while the router serves.

A ticket goes ``open`` → ``claimed`` (an operator took it; optional) → ``answered``. An
answered ticket is final: answering it again is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sqlite3
import threading
from dataclasses import asdict, dataclass
from typing import Any

from llmroute.errors import InvalidRequest, NotFound

STATUSES = ("open", "claimed", "answered")

_SCHEMA = """CREATE TABLE IF NOT EXISTS handoffs (
    id TEXT PRIMARY KEY, created_at REAL NOT NULL, status TEXT NOT NULL,
    strategy TEXT NOT NULL, request_id TEXT NOT NULL, endpoint TEXT NOT NULL,
    model TEXT NOT NULL, conversation TEXT NOT NULL, claimed_by TEXT, claimed_at REAL,
    answer TEXT, answered_by TEXT, answered_at REAL);
CREATE INDEX IF NOT EXISTS handoffs_status ON handoffs (status, created_at)"""
_COLUMNS = ("id", "created_at", "status", "strategy", "request_id", "endpoint", "model",
            "conversation", "claimed_by", "claimed_at", "answer", "answered_by",
            "answered_at")


@dataclass(frozen=True, slots=True)
class Ticket:
    """One hand-off: ``id`` (``hof-`` + 24 hex digits, unguessable: the client fetches the
    answer with it), ``created_at`` / ``claimed_at`` / ``answered_at`` epoch seconds,
    ``status`` (one of ``STATUSES``), the ``strategy`` header (``id@version``) that handed
    it off, the client's ``request_id``, ``endpoint`` and ``model``, the ``conversation``
    (the chat ``messages``, or ``[{"role": "user", "content": prompt}]``), the operator
    who ``claimed_by`` / ``answered_by`` it and the ``answer`` text."""

    id: str
    created_at: float
    status: str
    strategy: str
    request_id: str
    endpoint: str
    model: str
    conversation: list[dict[str, Any]]
    claimed_by: str | None = None
    claimed_at: float | None = None
    answer: str | None = None
    answered_by: str | None = None
    answered_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The ticket as JSON (``object: "handoff"``)."""
        return {"object": "handoff", **asdict(self)}


class HandoffStore:
    """Open, list, claim and answer tickets in the SQLite database at ``path``."""

    def __init__(self, path: str = ":memory:"):
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    async def open(self, strategy: str, request_id: str, endpoint: str, model: str,
                   conversation: list[dict[str, Any]], now: float) -> Ticket:
        """Queue a new open ticket (``now`` epoch s). Raises sqlite3.Error when the
        database cannot be written."""
        ticket = Ticket("hof-" + secrets.token_hex(12), now, "open", strategy, request_id,
                        endpoint, model, conversation)
        row = _row(ticket)
        await asyncio.to_thread(self._run, f"INSERT INTO handoffs ({', '.join(_COLUMNS)}) "
                                f"VALUES ({', '.join('?' * len(_COLUMNS))})", row, True)
        return ticket

    async def get(self, ticket_id: str) -> Ticket:
        """The ticket ``ticket_id``. Raises NotFound (404) when there is none."""
        rows = await asyncio.to_thread(self._run, f"SELECT {', '.join(_COLUMNS)} FROM "
                                       "handoffs WHERE id = ?", (ticket_id,))
        if not rows:
            raise NotFound(f"no hand-off ticket {ticket_id!r}", param="ticket_id",
                           code="ticket_not_found")
        return _ticket(rows[0])

    async def list(self, status: str | None = None, limit: int = 100) -> list[Ticket]:
        """The newest ``limit`` tickets (of ``status`` when given), newest first. Raises
        InvalidRequest for an unknown status."""
        if status is not None and status not in STATUSES:
            raise InvalidRequest(f"unknown ticket status {status!r} (one of "
                                 f"{', '.join(STATUSES)})", param="status")
        where, args = ("WHERE status = ? ", (status,)) if status else ("", ())
        rows = await asyncio.to_thread(self._run, f"SELECT {', '.join(_COLUMNS)} FROM "
                                       f"handoffs {where}ORDER BY created_at DESC, id "
                                       "LIMIT ?", (*args, limit))
        return [_ticket(r) for r in rows]

    async def claim(self, ticket_id: str, operator: str, now: float) -> Ticket:
        """Mark an open or claimed ticket claimed by ``operator``. Raises NotFound, or
        InvalidRequest (code ``ticket_answered``) when it is answered already."""
        return await self._move(ticket_id, "UPDATE handoffs SET status = 'claimed', "
                                "claimed_by = ?, claimed_at = ? WHERE id = ? AND status != "
                                "'answered'", (operator, now, ticket_id))

    async def answer(self, ticket_id: str, text: str, operator: str, now: float) -> Ticket:
        """Answer a ticket with ``text`` as ``operator``. Raises NotFound, or
        InvalidRequest (code ``ticket_answered``) when it is answered already."""
        return await self._move(ticket_id, "UPDATE handoffs SET status = 'answered', "
                                "answer = ?, answered_by = ?, answered_at = ? WHERE id = ? "
                                "AND status != 'answered'", (text, operator, now, ticket_id))

    def close(self) -> None:
        """Close the connection (a later call reopens it)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    async def _move(self, ticket_id: str, sql: str, args: tuple[Any, ...]) -> Ticket:
        changed = await asyncio.to_thread(self._change, sql, args)
        ticket = await self.get(ticket_id)
        if not changed:
            raise InvalidRequest(f"hand-off ticket {ticket_id} is answered already",
                                 param="ticket_id", code="ticket_answered")
        return ticket

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        """The connection; None, without creating the file, when the database does not
        exist yet and ``create`` is False (no ticket was ever opened: nothing to read)."""
        if self._conn is None:
            if not create and self.path != ":memory:" and not os.path.exists(self.path):
                return None
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=5.0)
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    def _run(self, sql: str, args: tuple[Any, ...], create: bool = False
             ) -> list[tuple[Any, ...]]:
        with self._lock:
            conn = self._connect(create)
            if conn is None:
                return []
            with conn:
                return conn.execute(sql, args).fetchall()

    def _change(self, sql: str, args: tuple[Any, ...]) -> int:
        with self._lock:
            conn = self._connect(False)
            if conn is None:
                return 0
            with conn:
                return conn.execute(sql, args).rowcount


def _row(t: Ticket) -> tuple[Any, ...]:
    return tuple(json.dumps(getattr(t, c)) if c == "conversation" else getattr(t, c)
                 for c in _COLUMNS)


def _ticket(row: tuple[Any, ...]) -> Ticket:
    fields = dict(zip(_COLUMNS, row, strict=True))
    fields["conversation"] = json.loads(fields["conversation"])
    return Ticket(**fields)
