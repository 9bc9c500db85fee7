"""JWT callers (``auth.jwt``): a bearer token from an identity provider, verified with PyJWT
against the provider's JWKS (``policy/jwks.py``), mapped onto the caller a key would be.

Verification: the header's ``alg`` must be one of ``auth.jwt.algorithms`` (asymmetric only:
``none`` and HMAC are refused before any key is looked up), its ``kid`` one of the JWKS's
keys; the signature, ``exp`` (required), ``nbf``, ``iat``, ``iss`` and ``aud`` are checked by
``jwt.decode`` with ``leeway_s`` of clock skew. Every refusal is a 401 naming what was wrong
(never the token) and is counted in ``llmroute_jwt_refusals_total{reason}``.

The caller (``Caller``, what a key gives): the ``claims.tenant`` claim names the tenant (its
record and limits from the key store, as a key's), ``claims.key`` who calls — the key id
``jwt:<value>`` in limits, traces and the audit, or, when the value is the id of a usable key
of that tenant in the key store, that key with its limits, models, pools, strategies and
priority. ``claims.roles`` containing ``operator`` gives the operator role;
``claims.priority`` names the priority class. So a JWT caller is admitted, limited and
audited exactly as a key.

Cost: a verified token is remembered (``cachetools.TTLCache`` keyed by the token, for
``auth.cache_ttl_s`` and never past its ``exp``, at most ``auth.jwt.cache_size``), as
Envoy's ``jwt_authn`` caches verified tokens (``JwtCacheConfig``): a client reusing its
token pays a dictionary lookup, not a signature check (``bench/jwt_verify.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import jwt
from cachetools import TTLCache

from llmroute.config.policy import JwtConfig
from llmroute.errors import AuthenticationFailed, StateUnavailable
from llmroute.policy.auth import Caller
from llmroute.policy.jwks import Jwks, JwtMetrics, claim_list
from llmroute.policy.keys import ApiKey, Tenant
from llmroute.policy.keystore_redis import AnyKeyStore

_REFUSALS: tuple[tuple[type[Exception], str, str], ...] = (
    (jwt.ExpiredSignatureError, "expired", "The token has expired."),
    (jwt.ImmatureSignatureError, "not_yet_valid", "The token is not valid yet (nbf/iat)."),
    (jwt.InvalidAudienceError, "audience", "The token is not for this audience."),
    (jwt.InvalidIssuerError, "issuer", "The token is not from the configured issuer."),
    (jwt.InvalidSignatureError, "signature", "The token's signature does not verify."),
    (jwt.MissingRequiredClaimError, "claims", "The token lacks a required claim"),
    (jwt.InvalidKeyError, "algorithm", "The token's algorithm does not fit its key."),
    (jwt.PyJWTError, "malformed", "The token is malformed"),
)
"""PyJWT's errors → (refusal reason, message); the first that matches wins."""


class JwtAuthenticator:
    """Tokens verified against ``jwks`` as ``config`` says (module docstring); tenants and
    key records from ``keys``; ``wall_clock`` epoch seconds, ``clock`` monotonic seconds
    (the caches); verified tokens kept ``ttl_s``."""

    def __init__(self, config: JwtConfig, jwks: Jwks, keys: AnyKeyStore, metrics: JwtMetrics,
                 ttl_s: float, clock: Callable[[], float], wall_clock: Callable[[], float]):
        self._config, self._jwks, self._keys, self._metrics = config, jwks, keys, metrics
        self._wall = wall_clock
        self._verified: TTLCache[str, tuple[Caller, float]] = TTLCache(
            config.cache_size, ttl_s, clock)
        self._audience = config.audience
        self._options = {"require": ["exp", "iss", "aud"]}

    async def authenticate(self, token: str) -> Caller:
        """The caller ``token`` stands for. Raises AuthenticationFailed (401)."""
        hit = self._verified.get(token)
        if hit is not None and self._wall() < hit[1] + self._config.leeway_s:
            return hit[0]
        claims = await self.verify(token)
        caller = await self._caller(claims)
        self._verified[token] = (caller, float(claims["exp"]))
        return caller

    async def verify(self, token: str) -> dict[str, Any]:
        """The verified claims of ``token`` (module docstring). Raises AuthenticationFailed."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise self._refused("malformed", f"The token is malformed: {exc}") from exc
        alg = header.get("alg")
        if alg not in self._config.algorithms:
            raise self._refused("algorithm", f"The token's algorithm {alg!r} is not "
                                f"accepted (accepted: {', '.join(self._config.algorithms)}).")
        key = await self._jwks.key(header.get("kid"))
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=[alg], audience=self._audience,
                issuer=self._config.issuer, leeway=self._config.leeway_s,
                options=self._options)  # type: ignore[arg-type]
        except jwt.PyJWTError as exc:
            reason, message = next((r, m) for kind, r, m in _REFUSALS if isinstance(exc, kind))
            if reason in ("claims", "malformed"):
                message = f"{message}: {exc}"
            raise self._refused(reason, message) from exc
        return claims

    def _refused(self, reason: str, message: str) -> AuthenticationFailed:
        self._metrics.refusals.labels(reason).inc()
        return AuthenticationFailed(message, code="invalid_token")

    async def close(self) -> None:
        """Stop a JWKS read under way."""
        await self._jwks.close()

    async def _caller(self, claims: dict[str, Any]) -> Caller:
        """The Caller of verified ``claims`` (module docstring)."""
        names = self._config.claims
        tenant_id, who = claims.get(names.tenant), claims.get(names.key)
        if not isinstance(tenant_id, str) or not tenant_id or not isinstance(who, str) \
                or not who:
            raise self._refused("claims", f"The token needs the string claims "
                                f"{names.tenant!r} (the tenant) and {names.key!r} (the "
                                "caller).")
        try:
            tenant = await self._keys.tenant(tenant_id) or Tenant(tenant_id)
            base = await self._keys.key(who) if who.startswith("key_") else None
        except sqlite3.Error as exc:
            raise StateUnavailable(f"the key store cannot be read: {exc}") from exc
        if base is None or base.tenant != tenant_id or not base.usable(self._wall()):
            base = ApiKey(id=f"jwt:{who}", prefix="", tenant=tenant_id, name=who)
        roles = claim_list(claims.get(names.roles))
        priority = claims.get(names.priority)
        key = _with(base, id=base.id if base.prefix else f"jwt:{who}",
                    role="operator" if "operator" in roles else base.role,
                    priority=priority if isinstance(priority, str) and priority
                    else base.priority)
        return Caller(key, tenant)


def _with(key: ApiKey, **changes: Any) -> ApiKey:
    """``key`` with ``changes`` (a new frozen record)."""
    fields = {f: getattr(key, f) for f in key.__dataclass_fields__}
    return ApiKey(**{**fields, **changes})
