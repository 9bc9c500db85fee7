"""Making and rotating keys (the CLI and the admin API share these)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from llmroute.errors import InvalidRequest
from llmroute.policy.keys import (
    ROLES,
    ApiKey,
    digest,
    display_prefix,
    new_key_id,
    new_secret,
)

if TYPE_CHECKING:  # redis-py is imported where a key store is opened, not here
    from llmroute.policy.keystore_redis import AnyKeyStore


async def issue_key(store: AnyKeyStore, tenant: str, now: float, **fields: Any
                    ) -> tuple[str, ApiKey]:
    """A new key of ``tenant`` made at epoch ``now`` with ``fields`` (``ApiKey``'s: name,
    limits, models, pools, strategies, priority, role, expires_at, metadata); returns the
    secret (shown once, never stored) and the record. Raises InvalidRequest for an unknown
    tenant, role or field."""
    if await store.tenant(tenant) is None:
        raise InvalidRequest(f"unknown tenant {tenant!r}: create it first (llmroute tenants "
                             f"create {tenant})", param="tenant")
    if fields.get("role", "inference") not in ROLES:
        raise InvalidRequest(f"unknown role {fields['role']!r}; use one of "
                             f"{', '.join(ROLES)}", param="role")
    secret = new_secret()
    try:
        key = ApiKey(new_key_id(), display_prefix(secret), tenant, created_at=now, **fields)
    except TypeError as exc:
        raise InvalidRequest(f"bad key field: {exc}") from exc
    await store.add_key(key, digest(secret))
    return secret, key


async def rotate_key(store: AnyKeyStore, key_id: str, now: float) -> tuple[str, ApiKey]:
    """A new key with ``key_id``'s tenant and settings; ``key_id`` is revoked. Returns the
    new secret and record. Raises InvalidRequest when ``key_id`` is unknown or revoked."""
    old = await store.key(key_id)
    if old is None or old.revoked_at is not None:
        raise InvalidRequest(f"no active key {key_id!r}", param="key_id")
    keep = {f.name: getattr(old, f.name) for f in dataclasses.fields(old)
            if f.name not in ("id", "prefix", "tenant", "revoked_at", "created_at")}
    secret, key = await issue_key(store, old.tenant, now, **keep)
    await store.revoke(key_id, now)
    return secret, key
