"""The SQLite key store: tenants and key records, keys held only as SHA-256 digests.

The stdlib ``sqlite3`` runs in worker threads (``asyncio.to_thread``) behind one lock, so
the event loop never waits on the disk. The request path reads it once per key per cache
period (``policy/auth.py``); the CLI and the admin API write it. Schema: ``tenants(id,
spec, created_at)`` and ``keys(id, prefix, digest UNIQUE, tenant, revoked_at, created_at,
spec)``, ``spec`` a JSON object of the record's other fields.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from llmroute.policy.keys import ApiKey, Limits, Tenant

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (id TEXT PRIMARY KEY, spec TEXT NOT NULL,
                                    created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS keys (id TEXT PRIMARY KEY, prefix TEXT NOT NULL,
                                 digest TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL,
                                 revoked_at REAL, created_at REAL NOT NULL, spec TEXT NOT NULL);
"""
_KEY_COLS = "id, prefix, tenant, revoked_at, created_at, spec"


class KeyStore:
    """Tenants and keys in the SQLite file ``path`` (``:memory:`` for tests); the file is
    opened on first use. Methods raise sqlite3.Error when the database cannot be used."""

    def __init__(self, path: str):
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    async def put_tenant(self, tenant: Tenant) -> None:
        """Create or replace ``tenant``."""
        await self._run("INSERT OR REPLACE INTO tenants VALUES (?, ?, ?)",
                        tenant_row(tenant))

    async def tenant(self, tenant_id: str) -> Tenant | None:
        """The tenant ``tenant_id``, or None."""
        rows = await self._run("SELECT id, spec, created_at FROM tenants WHERE id = ?",
                               (tenant_id,))
        return tenant_from_row(rows[0]) if rows else None

    async def tenants(self) -> list[Tenant]:
        """Every tenant, by id."""
        return [tenant_from_row(r) for r in await self._run(
            "SELECT id, spec, created_at FROM tenants ORDER BY id", ())]

    async def add_key(self, key: ApiKey, key_digest: str) -> None:
        """Store a new key's record under its digest. Raises sqlite3.IntegrityError for a
        duplicate id or digest."""
        row = key_row(key, key_digest)
        await self._run("INSERT INTO keys VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (row[0], row[1], row[6], *row[2:6]))

    async def find(self, key_digest: str) -> tuple[ApiKey, str] | None:
        """The key whose digest is ``key_digest`` and the digest as stored, or None."""
        rows = await self._run(f"SELECT {_KEY_COLS}, digest FROM keys WHERE digest = ?",
                               (key_digest,))
        return (key_from_row(rows[0]), rows[0][6]) if rows else None

    async def key(self, key_id: str) -> ApiKey | None:
        """The key ``key_id``, or None."""
        rows = await self._run(f"SELECT {_KEY_COLS} FROM keys WHERE id = ?", (key_id,))
        return key_from_row(rows[0]) if rows else None

    async def keys(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key (of ``tenant`` when given), oldest first."""
        where, args = ("WHERE tenant = ?", (tenant,)) if tenant else ("", ())
        return [key_from_row(r) for r in await self._run(
            f"SELECT {_KEY_COLS} FROM keys {where} ORDER BY created_at, id", args)]

    async def revoke(self, key_id: str, at: float) -> bool:
        """Mark key ``key_id`` revoked at epoch ``at``; False when there is no such key or
        it already was."""
        return bool(await self._run("UPDATE keys SET revoked_at = ? WHERE id = ? AND "
                                    "revoked_at IS NULL", (at, key_id), count=True))

    def close(self) -> None:
        """Close the database (reopened on next use)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    async def _run(self, sql: str, args: tuple[Any, ...], count: bool = False) -> Any:
        return await asyncio.to_thread(self._execute, sql, args, count)

    def _execute(self, sql: str, args: tuple[Any, ...], count: bool) -> Any:
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(self._path, check_same_thread=False)
                self._conn.executescript(_SCHEMA)
            with self._conn:
                cur = self._conn.execute(sql, args)
                return cur.rowcount if count else cur.fetchall()


def tenant_row(tenant: Tenant) -> tuple[str, str, float]:
    """``tenant`` as a stored row: ``(id, spec JSON, created_at)``."""
    spec = {"limits": dataclasses.asdict(tenant.limits), "metadata": tenant.metadata}
    return tenant.id, json.dumps(spec), tenant.created_at


def key_row(key: ApiKey, key_digest: str) -> tuple[Any, ...]:
    """``key`` as a stored row: ``(id, prefix, tenant, revoked_at, created_at, spec JSON,
    digest)`` (the order ``key_from_row`` reads)."""
    spec = {f.name: getattr(key, f.name) for f in dataclasses.fields(key)
            if f.name not in ("id", "prefix", "tenant", "revoked_at", "created_at")}
    spec["limits"] = dataclasses.asdict(key.limits)
    return (key.id, key.prefix, key.tenant, key.revoked_at, key.created_at, json.dumps(spec),
            key_digest)


def tenant_from_row(row: Sequence[Any]) -> Tenant:
    """The Tenant of a ``tenant_row``."""
    spec = json.loads(row[1])
    return Tenant(row[0], Limits(**spec["limits"]), spec["metadata"], row[2])


def key_from_row(row: Sequence[Any]) -> ApiKey:
    """The ApiKey of a ``key_row`` (its first six fields)."""
    spec = json.loads(row[5])
    spec["limits"] = Limits(**spec["limits"])
    for name in ("models", "pools", "strategies"):
        spec[name] = tuple(spec[name])
    return ApiKey(id=row[0], prefix=row[1], tenant=row[2], revoked_at=row[3],
                  created_at=row[4], **spec)
