"""The identity provider's signing keys (a JWKS, RFC 7517) for JWT callers: read from
``auth.jwt.jwks_url`` (aiohttp) or ``jwks_file``, parsed by PyJWT (``PyJWKSet``), kept in
memory and read again with a bound.

* Every ``refresh_s`` the JWKS is read again in the background; the request that notices
  starts it and does not wait.
* A token naming a ``kid`` not in the set makes the request read it again (the provider
  rotated its keys) — at most once per ``min_refresh_s``, however many such tokens come,
  and one read at a time (concurrent requests share it). Each read waits ``timeout_s``.
* When reads fail the keys last read keep verifying for ``keys_ttl_s`` after that read;
  then every key lookup is refused (401 ``jwks_unavailable``) until a read succeeds.

Reads are counted in ``llmroute_jwks_reads_total{outcome}`` and logged when they start or
stop failing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from llmroute.config.policy import JwtConfig
from llmroute.errors import AuthenticationFailed

log = structlog.get_logger("llmroute.jwt")


class JwtMetrics:
    """``llmroute_jwt_refusals_total{reason}`` (a JWT refused: ``malformed``,
    ``algorithm``, ``unknown_kid``, ``signature``, ``expired``, ``not_yet_valid``,
    ``audience``, ``issuer``, ``claims``, ``jwks_unavailable``),
    ``llmroute_jwks_reads_total{outcome}`` (``ok``, ``error``) and
    ``llmroute_jwks_age_seconds`` (since the keys in use were read; -1 before any) on
    ``registry``."""

    def __init__(self, registry: CollectorRegistry | None):
        self.refusals = Counter("llmroute_jwt_refusals", "JWTs refused, by reason",
                                ["reason"], registry=registry)
        self.reads = Counter("llmroute_jwks_reads", "Reads of the identity provider's JWKS, "
                             "by outcome", ["outcome"], registry=registry)
        self.age = Gauge("llmroute_jwks_age_seconds", "Seconds since the JWT signing keys in "
                         "use were read (-1: never)", registry=registry)
        self.age.set(-1)


class Jwks:
    """The signing keys of ``config``'s JWKS (module docstring); ``clock`` is monotonic
    seconds."""

    def __init__(self, config: JwtConfig, metrics: JwtMetrics, clock: Callable[[], float]):
        self._config, self._metrics, self._clock = config, metrics, clock
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._read_at: float | None = None  # the last successful read
        self._tried_at: float | None = None  # the last read started
        self._reading: asyncio.Task[None] | None = None
        self._failing = False

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """The key named ``kid`` (None: the set's only key). Raises AuthenticationFailed
        (401) when it is unknown after the bounded re-read, or no keys are usable."""
        now = self._clock()
        if self._read_at is None or now - self._read_at > self._config.keys_ttl_s:
            await self._read_now(now)
        elif now - self._read_at > self._config.refresh_s:
            self._start_read(now)
        self._metrics.age.set(self._clock() - self._read_at if self._read_at else -1)
        found = self._find(kid)
        if found is None and self._may_read(now):
            await self._read_now(now)
            found = self._find(kid)
        if found is None:
            self._metrics.refusals.labels("unknown_kid").inc()
            raise AuthenticationFailed(f"The token's signing key (kid {kid!r}) is not one "
                                       "of the identity provider's keys.",
                                       code="invalid_token")
        return found

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    def _may_read(self, now: float) -> bool:
        return self._tried_at is None or now - self._tried_at >= self._config.min_refresh_s

    async def _read_now(self, now: float) -> None:
        """Read (or join the read under way); raise 401 when the keys are then expired."""
        if (self._reading is None or self._reading.done()) and self._may_read(now):
            self._start_read(now)
        if self._reading is not None and not self._reading.done():
            await asyncio.shield(self._reading)
        if self._read_at is None or self._clock() - self._read_at > self._config.keys_ttl_s:
            self._metrics.refusals.labels("jwks_unavailable").inc()
            raise AuthenticationFailed(
                "The identity provider's signing keys (JWKS) could not be read, and the "
                "keys read before have expired: tokens cannot be verified now.",
                code="jwks_unavailable")

    def _start_read(self, now: float) -> None:
        if self._reading is not None and not self._reading.done():
            return
        self._tried_at = now
        self._reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        """One bounded read; on success the keys are replaced, on failure kept."""
        try:
            async with asyncio.timeout(self._config.timeout_s):
                raw = await self._fetch()
            keys = {k.key_id: k for k in jwt.PyJWKSet.from_dict(orjson.loads(raw)).keys}
        except (OSError, TimeoutError, aiohttp.ClientError, ValueError,
                jwt.PyJWKSetError, jwt.PyJWKError) as exc:
            self._metrics.reads.labels("error").inc()
            if not self._failing:
                self._failing = True
                log.warning("jwks_read_failed", error=f"{type(exc).__name__}: {exc}")
            return
        self._keys, self._read_at = keys, self._clock()
        self._metrics.reads.labels("ok").inc()
        if self._failing:
            self._failing = False
            log.info("jwks_read_recovered", keys=len(keys))

    async def _fetch(self) -> bytes:
        c = self._config
        if c.jwks_file is not None:
            return await asyncio.to_thread(Path(c.jwks_file).read_bytes)
        assert c.jwks_url is not None
        async with aiohttp.ClientSession() as session, session.get(c.jwks_url) as r:
            r.raise_for_status()
            body: bytes = await r.read()
            return body

    async def close(self) -> None:
        """Cancel a read under way."""
        if self._reading is not None:
            self._reading.cancel()


def claim_list(value: Any) -> tuple[str, ...]:
    """A roles claim as strings: a list of strings, or one space-separated string (OAuth
    ``scope`` style)."""
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str))
    return ()
