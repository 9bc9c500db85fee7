"""API keys and tenants: the records, key generation, and reading a key off a request.

A key is ``lr-`` followed by 32 URL-safe base64 characters (``secrets.token_urlsafe(24)``:
192 random bits). It is shown once, when made; the store keeps only its SHA-256 digest, its
id (``key_…``, for the CLI and admin API) and its display prefix (the first 8 characters
after ``lr-``: 48 bits, the other 144 stay secret). A presented key is checked for shape
before anything else (length first), so a 10 kB header or non-ASCII bytes cost nothing.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

KEY_PREFIX = "lr-"
_SHAPE = re.compile(r"lr-[A-Za-z0-9_-]{32}")
MAX_KEY_CHARS = 64
"""Presented keys longer than this are refused unread (a key is 35 characters)."""
ROLES = ("inference", "operator")
"""What a key may do: ``inference`` the OpenAI endpoints only; ``operator`` also the operator
surfaces (``/debug/*``, ``/metrics``, ``/trace``, the dashboard's data) and everything under
``/admin/`` (the hand-off queue, reload, key management: ``api/admin.py``)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits of a key or a tenant, None meaning none: requests (``rpm``) and tokens
    (``tpm``) per minute, tokens per UTC day and month, requests in flight at once,
    ``max_context_tokens``: the most prompt + output tokens one request may use (below the
    engines' own contexts; ``policy/counting.py``), and cost budgets per UTC day and month
    (``daily_cost``, ``monthly_cost``: spend on priced pools, in the pools' price unit)."""

    rpm: int | None = None
    tpm: int | None = None
    daily_tokens: int | None = None
    monthly_tokens: int | None = None
    max_concurrency: int | None = None
    max_context_tokens: int | None = None
    daily_cost: float | None = None
    monthly_cost: float | None = None


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant ``id`` whose ``limits`` apply on top of each of its keys'."""

    id: str
    limits: Limits = Limits()
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key's record (never its secret). ``models``/``pools``/``strategies``: what it may
    use (empty: anything); ``priority`` its class; ``role`` one of ``ROLES``;
    ``expires_at``/``revoked_at``/``created_at`` epoch seconds."""

    id: str
    prefix: str
    tenant: str
    name: str = ""
    limits: Limits = Limits()
    models: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    strategies: tuple[str, ...] = ()
    priority: str = "standard"
    role: str = "inference"
    expires_at: float | None = None
    revoked_at: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0

    @property
    def display(self) -> str:
        """How logs and messages name the key: ``lr-AbCd1234…`` (a JWT caller, which has
        no prefix: its id, ``jwt:<subject>``)."""
        return f"{KEY_PREFIX}{self.prefix}…" if self.prefix else self.id

    def usable(self, now: float) -> bool:
        """Neither revoked nor expired at epoch ``now``."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


def new_secret() -> str:
    """A fresh key: ``lr-`` + 32 URL-safe characters (192 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(24)


def new_key_id() -> str:
    """A fresh key id, ``key_`` + 12 hex digits (not secret)."""
    return "key_" + secrets.token_hex(6)


def digest(secret: str) -> str:
    """The stored form of a key: its SHA-256, hex."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def display_prefix(secret: str) -> str:
    """The 8 characters after ``lr-`` that name a key in lists and logs."""
    return secret[len(KEY_PREFIX):len(KEY_PREFIX) + 8]


def well_formed(secret: str) -> bool:
    """Whether ``secret`` has a key's shape (checked before any lookup)."""
    return len(secret) <= MAX_KEY_CHARS and _SHAPE.fullmatch(secret) is not None


def looks_like_jwt(secret: str) -> bool:
    """Whether a presented credential has a JWS compact form's shape (three base64url
    parts, a JSON header: ``eyJ…``) rather than an API key's."""
    return secret.startswith("eyJ") and secret.count(".") == 2


def presented_key(authorization: str | None, x_api_key: str | None) -> str | None:
    """The key a request presents: ``Authorization: Bearer <key>`` (scheme any case), else
    ``x-api-key``; None when neither is there. The value is not checked here."""
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return authorization.strip()
    return x_api_key.strip() if x_api_key else None
