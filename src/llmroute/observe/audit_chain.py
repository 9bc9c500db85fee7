"""The decision audit's storage: an append-only SQLite table whose records form a SHA-256
hash chain, and the readers ``llmroute audit`` uses (``verify``, ``show``, ``query``).

Each row holds ``seq`` (1, 2, …), ``record`` — the canonical JSON (orjson, sorted keys) of
the request's decision fields plus ``prev``, the previous record's hash — and ``hash``, the
SHA-256 (hex) of ``record``'s bytes. Editing any byte of a record breaks its hash; deleting
or reordering records breaks a ``prev`` link or the ``seq`` run. Retention deletes the
oldest rows and notes the last deleted ``seq`` and hash in ``audit_head``, so the walk
starts from there (the first row's ``prev`` must match it). A ``gap`` record (``kind:
"gap"``, ``dropped``: how many) marks decisions that could not be written.

Durability: the database runs in WAL mode with ``synchronous=NORMAL`` — a commit appends
to the write-ahead log without an fsync; SQLite syncs at checkpoints. A power loss or OS
crash may lose the last transactions (the newest batch or batches) but never leaves a
half-written one: what survives is a prefix of the chain, and ``verify`` still passes on
it. A crash of the router process alone loses nothing already committed.
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

GENESIS = "0" * 64
ROWS_PER_INSERT = 64
"""Rows per ``INSERT`` statement (5 values a row: 320 bound values, within the 999 that even
old SQLite builds allow)."""
BUSY_TIMEOUT_S = 10.0
"""How long a writer waits for another process's write transaction on the same file (s)."""
SCHEMA = """CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY, at REAL NOT NULL, request_id TEXT NOT NULL,
    record TEXT NOT NULL, hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audit_at ON audit (at);
CREATE INDEX IF NOT EXISTS audit_request ON audit (request_id);
CREATE TABLE IF NOT EXISTS audit_head (id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL, hash TEXT NOT NULL)"""


def canonical(record: dict[str, Any]) -> bytes:
    """The canonical JSON encoding the hash covers (sorted keys, no spaces, UTF-8)."""
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def digest(data: bytes) -> str:
    """SHA-256 of ``data``, hex."""
    return hashlib.sha256(data).hexdigest()


def connect(path: str) -> sqlite3.Connection:
    """Open (creating) the audit database at ``path``. Raises sqlite3.Error."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    return conn


def tail(conn: sqlite3.Connection) -> tuple[int, str]:
    """``(seq, hash)`` of the last record (or of the retention head; ``(0, GENESIS)``)."""
    row = conn.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
    return row or head(conn)


def head(conn: sqlite3.Connection) -> tuple[int, str]:
    """``(seq, hash)`` of the last record retention deleted; ``(0, GENESIS)`` when none."""
    row = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
    return row or (0, GENESIS)


def append(conn: sqlite3.Connection, records: Iterable[dict[str, Any]], *,
           owned: bool = False) -> tuple[int, str]:
    """Chain and insert ``records`` in one transaction (each needs ``at`` and
    ``request_id``); returns the new ``(seq, hash)`` tail. ``owned``: the records are the
    caller's to change (each gets its ``prev`` key in place instead of in a copy). The rows
    go in ``ROWS_PER_INSERT`` at a time, one multi-row ``INSERT`` each (a third less of
    SQLite's work per row than a statement per row). The tail is read inside the write
    transaction (``BEGIN IMMEDIATE``), so writers in several processes sharing one file
    (``serve --workers``) take turns and each batch extends the chain the last one left,
    waiting up to the connection's busy timeout. Raises sqlite3.Error."""
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        seq, prev = tail(conn)
        values: list[Any] = []  # the rows' columns in a row, 5 a row
        for rec in records:
            if owned:
                rec["prev"] = prev
            else:
                rec = {**rec, "prev": prev}
            data = canonical(rec)
            seq, prev = seq + 1, digest(data)
            values += (seq, rec["at"], rec["request_id"], data.decode(), prev)
        step = ROWS_PER_INSERT * 5
        for i in range(0, len(values), step):
            chunk = values[i:i + step]
            conn.execute(_insert(len(chunk) // 5), chunk)
    return seq, prev


@functools.cache
def _insert(rows: int) -> str:
    """The ``INSERT`` of ``rows`` audit rows (SQLite's statement cache keeps each size's
    prepared form: ``ROWS_PER_INSERT`` of them at most)."""
    return "INSERT INTO audit VALUES " + ", ".join(["(?, ?, ?, ?, ?)"] * rows)


def prune(conn: sqlite3.Connection, before: float) -> int:
    """Delete records older than ``before`` (epoch s), keeping the chain's head; returns
    how many went."""
    with conn:
        row = conn.execute("SELECT seq, hash FROM audit WHERE at < ? ORDER BY seq DESC "
                           "LIMIT 1", (before,)).fetchone()
        if row is None:
            return 0
        conn.execute("INSERT OR REPLACE INTO audit_head VALUES (1, ?, ?)", row)
        return conn.execute("DELETE FROM audit WHERE seq <= ?", (row[0],)).rowcount


@dataclass(frozen=True)
class Verdict:
    """``ok`` when the chain is intact; ``checked`` records walked; ``broken``: the ``seq``
    of the first broken record and ``why``; ``gaps``: ``(seq, dropped)`` of gap records."""

    ok: bool
    checked: int
    broken: int | None = None
    why: str = ""
    gaps: tuple[tuple[int, int], ...] = ()


def verify(conn: sqlite3.Connection) -> Verdict:
    """Walk the chain in ``seq`` order from the retention head. Raises sqlite3.Error."""
    seq, prev = head(conn)
    gaps: list[tuple[int, int]] = []
    n = 0
    for n, (s, at, rid, text, h) in enumerate(conn.execute(
            "SELECT seq, at, request_id, record, hash FROM audit ORDER BY seq"), 1):
        why = _broken(s, seq, prev, at, rid, text, h)
        if why:
            return Verdict(False, n - 1, s, why, tuple(gaps))
        rec = orjson.loads(text)
        if rec.get("kind") == "gap":
            gaps.append((s, int(rec.get("dropped", 0))))
        seq, prev = s, h
    return Verdict(True, n, gaps=tuple(gaps))


def _broken(s: int, seq: int, prev: str, at: float, rid: str, text: str, h: str) -> str:
    """Why record ``s`` breaks the chain after ``(seq, prev)``, or ``""``."""
    if s != seq + 1:
        return f"expected record {seq + 1} next, found {s} (a record was deleted)"
    if digest(text.encode()) != h:
        return "its hash does not match its content (the record was edited)"
    try:
        rec = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "its content is not JSON (the record was edited)"
    if rec.get("prev") != prev:
        return "its prev hash does not match the record before it (deleted or reordered)"
    if rec.get("request_id") != rid or rec.get("at") != at:
        return "its indexed columns differ from its content (the row was edited)"
    return ""


def show(conn: sqlite3.Connection, request_id: str) -> list[dict[str, Any]]:
    """The records of ``request_id`` (with their ``seq`` and ``hash``)."""
    rows = conn.execute("SELECT seq, record, hash FROM audit WHERE request_id = ? ORDER BY "
                        "seq", (request_id,)).fetchall()
    return [{"seq": s, **orjson.loads(t), "hash": h} for s, t, h in rows]


def query(conn: sqlite3.Connection, since: float, until: float, **match: str | None
          ) -> list[dict[str, Any]]:
    """Records with ``since <= at < until`` (epoch s), filtered on any of ``backend``,
    ``strategy`` (``id`` or ``id@version``) and ``tenant`` given."""
    sql = "SELECT seq, record FROM audit WHERE at >= ? AND at < ?"
    params: list[Any] = [since, until]
    for key in ("backend", "tenant"):
        if match.get(key):
            sql += f" AND json_extract(record, '$.{key}') = ?"
            params.append(match[key])
    if match.get("strategy"):
        sql += " AND (json_extract(record, '$.strategy') = ? OR " \
               "json_extract(record, '$.strategy') LIKE ? || '@%')"
        params += [match["strategy"], match["strategy"]]
    rows = conn.execute(sql + " ORDER BY seq", params).fetchall()
    return [{"seq": s, **orjson.loads(t)} for s, t in rows]
