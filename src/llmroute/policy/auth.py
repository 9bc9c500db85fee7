"""Authenticate a request: the presented key → its record and tenant, or a 401.

Lookups go to the key store once per key per ``cache_ttl_s`` (``cachetools.TTLCache``, at
most ``cache_size`` entries — past it the expired go, then the least recently used — keyed
by the key's digest, never the key); concurrent first requests with one key share one lookup.
Unknown keys are cached too, so a client retrying a bad key does not reach the disk per
request. Revocation and expiry are read from the cached record: a revoked key stops working
within ``cache_ttl_s``.
"""

from __future__ import annotations

import asyncio
import hmac
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cachetools import TTLCache

from llmroute.errors import AuthenticationFailed, PermissionDenied, StateUnavailable
from llmroute.policy.keys import ApiKey, Tenant, digest, presented_key, well_formed

if TYPE_CHECKING:  # redis-py is imported where a key store is opened, not here
    from llmroute.policy.keystore_redis import AnyKeyStore


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated request's key and tenant; ``budget_left``: the smallest fraction
    (0–1) of their cost budgets left when this request was admitted (None: no budget, or
    not admitted yet; ``Ticket.budget_left``)."""

    key: ApiKey
    tenant: Tenant
    budget_left: float | None = None

    def check_model(self, model: str) -> None:
        """Raises PermissionDenied (403) when the key's ``models`` exclude ``model``."""
        if self.key.models and model not in self.key.models:
            raise PermissionDenied(f"key {self.key.display} may not use model {model!r}",
                                   param="model", code="model_not_allowed")

    def check_strategy(self, strategy_id: str) -> None:
        """Raises PermissionDenied (403) when the key's ``strategies`` exclude the matched
        strategy ``strategy_id`` (the pipeline does not ask for the built-in one)."""
        if self.key.strategies and strategy_id not in self.key.strategies:
            raise PermissionDenied(f"key {self.key.display} may not use strategy "
                                   f"{strategy_id!r}", param="model",
                                   code="strategy_not_allowed")

    def check_pool(self, pool: str) -> None:
        """Raises PermissionDenied (403) when the key's ``pools`` exclude ``pool``."""
        if self.key.pools and pool not in self.key.pools:
            raise PermissionDenied(f"key {self.key.display} may not use pool {pool!r}",
                                   param="model", code="pool_not_allowed")


_Found = tuple[Caller, str] | None  # the key's record and tenant, the stored digest


class Authenticator:
    """Keys from ``store``, cached (module docstring); ``wall_clock`` (epoch s) judges
    expiry, ``clock`` (monotonic s) the cache."""

    def __init__(self, store: AnyKeyStore, ttl_s: float, size: int, clock: Callable[[], float],
                 wall_clock: Callable[[], float]):
        self._store = store
        self._wall = wall_clock
        self._cache: TTLCache[str, asyncio.Future[_Found]] = TTLCache(size, ttl_s, clock)

    async def authenticate(self, authorization: str | None, x_api_key: str | None) -> Caller:
        """The caller presenting these header values. Raises AuthenticationFailed (401) for
        no key, a malformed, unknown, revoked or expired one; the message never holds the
        presented value."""
        secret = presented_key(authorization, x_api_key)
        if secret is None:
            raise AuthenticationFailed(
                "You didn't provide an API key: send it as 'Authorization: Bearer <key>' or "
                "in the 'x-api-key' header.", code="missing_api_key")
        if not well_formed(secret):
            raise AuthenticationFailed("Incorrect API key provided (malformed).")
        wanted = digest(secret)
        pending = self._lookup(wanted)
        try:  # a lookup already done is read without a coroutine to wait on
            found = pending.result() if pending.done() else await asyncio.shield(pending)
        except Exception:
            self._cache.pop(wanted, None)  # a failed lookup is not cached
            raise
        if found is None or not hmac.compare_digest(found[1], wanted):
            raise AuthenticationFailed("Incorrect API key provided.")
        caller = found[0]
        key = caller.key
        if not key.usable(self._wall()):
            state = "revoked" if key.revoked_at is not None else "expired"
            raise AuthenticationFailed(f"API key {key.display} is {state}.")
        return caller

    def forget(self, key_digest: str | None = None) -> None:
        """Drop one cached key (its digest), or all: the next request reads the store."""
        if key_digest is None:
            self._cache.clear()
        else:
            self._cache.pop(key_digest, None)

    def _lookup(self, key_digest: str) -> asyncio.Future[_Found]:
        """The cached lookup of ``key_digest`` (started now when not cached, or expired)."""
        try:
            return self._cache[key_digest]
        except KeyError:
            pending = self._cache[key_digest] = asyncio.ensure_future(self._load(key_digest))
            return pending

    async def _load(self, key_digest: str) -> _Found:
        try:
            found = await self._store.find(key_digest)
            if found is None:
                return None
            key, stored = found
            return Caller(key, await self._store.tenant(key.tenant) or Tenant(key.tenant)), stored
        except sqlite3.Error as exc:
            raise StateUnavailable(f"the key store cannot be read: {exc}") from exc
