"""Stored Responses (``/v1/responses`` with ``store: true``): the ``ResponseStore`` contract
and its SQLite implementation (the Redis one: ``state/responses_redis.py``).

A record is the caller's bytes (the API layer's JSON: the response object and the
conversation it continues) under the response's id, with its ``owner`` (the tenant; ``""``
with auth off). The store keeps each record ``ttl_s`` seconds and at most ``max_entries``
of them, the oldest dropped first; it never interprets a record. Whose record it is is
checked by the caller on ``get`` (a record of another tenant is answered as unknown), and
by the store itself on ``delete`` (only the owner's record is deleted).

SQLite: the stdlib ``sqlite3`` in worker threads (``asyncio.to_thread``) behind one lock,
as the key store (``policy/keystore.py``); WAL journal, ``synchronous=NORMAL`` (a record
survives a crash of the process, not always one of the machine). Expired records are never
read; every ``PRUNE_EVERY`` puts the expired and those past ``max_entries`` are deleted.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from llmroute.errors import StateUnavailable

PRUNE_EVERY = 64
"""Puts between two prunes of the SQLite store (a prune is two indexed DELETEs)."""

_SCHEMA = """
PRAGMA journal_mode=WAL;
PRAGMA synchronous=NORMAL;
CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, owner TEXT NOT NULL,
                                      at REAL NOT NULL, expires REAL NOT NULL,
                                      record BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS responses_at ON responses (at);
"""


class ResponseStore(Protocol):
    """Records by response id (module docstring). Every method raises StateUnavailable when
    the store cannot be used."""

    async def put(self, response_id: str, owner: str, record: bytes) -> None:
        """Keep ``record`` under ``response_id`` for ``owner`` (replacing one there)."""
        ...

    async def get(self, response_id: str) -> tuple[str, bytes] | None:
        """``(owner, record)`` of ``response_id``, or None when unknown or expired."""
        ...

    async def delete(self, response_id: str, owner: str) -> bool:
        """Delete ``response_id`` if ``owner`` owns it; whether a record was deleted."""
        ...

    async def close(self) -> None:
        """Release the store's connections."""
        ...


class SqliteResponses:
    """``ResponseStore`` in the SQLite file ``path`` (``:memory:``: this process only),
    opened on first use; ``clock`` gives epoch seconds."""

    def __init__(self, path: str, ttl_s: float, max_entries: int,
                 clock: Callable[[], float] = time.time):
        self._path, self._ttl, self._max = path, ttl_s, max_entries
        self._clock = clock
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._puts = 0

    async def put(self, response_id: str, owner: str, record: bytes) -> None:
        """See ``ResponseStore.put``; every ``PRUNE_EVERY`` puts also prunes."""
        now = self._clock()
        self._puts += 1
        prune = self._puts % PRUNE_EVERY == 0
        await self._run(self._put, (response_id, owner, now, now + self._ttl, record), prune)

    async def get(self, response_id: str) -> tuple[str, bytes] | None:
        """See ``ResponseStore.get``."""
        rows = await self._run(self._query, "SELECT owner, record FROM responses WHERE id = ? "
                               "AND expires > ?", (response_id, self._clock()))
        return (rows[0][0], bytes(rows[0][1])) if rows else None

    async def delete(self, response_id: str, owner: str) -> bool:
        """See ``ResponseStore.delete``."""
        return bool(await self._run(self._count, "DELETE FROM responses WHERE id = ? AND "
                                    "owner = ? AND expires > ?",
                                    (response_id, owner, self._clock())))

    async def close(self) -> None:
        """Close the database (reopened on next use)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await asyncio.to_thread(self._locked, fn, *args)
        except sqlite3.Error as exc:
            raise StateUnavailable(f"the response store cannot be used: {exc}") from exc

    def _locked(self, fn: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(self._path, check_same_thread=False)
                self._conn.executescript(_SCHEMA)
            with self._conn:
                return fn(self._conn, *args)

    def _put(self, conn: sqlite3.Connection, row: tuple[Any, ...], prune: bool) -> None:
        conn.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)", row)
        if prune:
            conn.execute("DELETE FROM responses WHERE expires <= ?", (row[2],))
            conn.execute("DELETE FROM responses WHERE at <= (SELECT at FROM responses "
                         "ORDER BY at DESC LIMIT 1 OFFSET ?)", (self._max,))

    @staticmethod
    def _query(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[Any]:
        return conn.execute(sql, args).fetchall()

    @staticmethod
    def _count(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> int:
        return conn.execute(sql, args).rowcount
