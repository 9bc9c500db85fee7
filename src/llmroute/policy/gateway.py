"""The gateway policies the pipeline calls: ``authenticate`` (keys), ``admit`` (model
permission, limits, quotas, concurrency) and the operator surfaces' check: the admin key or
an ``operator`` key (``require_operator``).

Built once by the composition root (``assemble/policy.py``) when ``auth.enabled``; the
request path then touches no disk (keys are cached, ``policy/auth.py``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmroute.errors import AuthenticationFailed, PermissionDenied
from llmroute.policy.auth import Authenticator, Caller
from llmroute.policy.keys import looks_like_jwt, presented_key
from llmroute.policy.limits import Limiter, Ticket
from llmroute.state.protocol import StateStore
from llmroute.types import ChatRequest

if TYPE_CHECKING:  # PyJWT and redis-py are imported only when configured
    from llmroute.policy.jwt import JwtAuthenticator
    from llmroute.policy.keystore_redis import AnyKeyStore

MAX_ADMIN_KEY_CHARS = 512
ADMIN = "admin"
"""Who ``require_operator`` says presented the admin key (keys are named by their id)."""


OPERATOR_ONLY = "This endpoint needs the admin key or a key with the operator role."
"""The refusal's message on an operator surface (401 without a key, 403 with another)."""


@dataclass(frozen=True)
class Policy:
    """Keys (``auth``, over the key store ``keys``), admission (``limiter``, over the state
    ``store``), the admin key's SHA-256 ``admin_digest``, whether ``/metrics`` is open, and
    JWT callers (``jwt``; None: keys only)."""

    auth: Authenticator
    limiter: Limiter
    keys: AnyKeyStore
    store: StateStore
    admin_digest: bytes
    metrics_open: bool = False
    jwt: JwtAuthenticator | None = None

    def authenticate(self, headers: Mapping[str, str]) -> Awaitable[Caller]:
        """The caller presenting a key in ``headers`` (``x-api-key`` is read only without
        an ``authorization``), or, with ``jwt``, a JWT there, to await: the key's or the
        JWT's authenticator itself, no coroutine of its own between (one per request).
        Awaiting it raises AuthenticationFailed (401)."""
        authorization = headers.get("authorization")
        x_api_key = None if authorization else headers.get("x-api-key")
        if self.jwt is not None:
            secret = presented_key(authorization, x_api_key)
            if secret is not None and looks_like_jwt(secret):
                return self.jwt.authenticate(secret)
        return self.auth.authenticate(authorization, x_api_key)

    def admit(self, caller: Caller, request: ChatRequest) -> Awaitable[Ticket]:
        """Admit ``request`` for ``caller``: the limiter's admission to await (no coroutine
        of its own between). Raises PermissionDenied (403: the key may not use the model)
        at once; awaiting it raises RateLimited (429)."""
        caller.check_model(request.model)
        return self.limiter.admit(caller, request)

    async def require_operator(self, headers: Mapping[str, str]) -> str:
        """Who presents the admin key (``ADMIN``) or a usable key with the ``operator``
        role (its id). Raises AuthenticationFailed (401) without a key or with a malformed
        (a wrong admin key included), unknown, revoked or expired one, PermissionDenied
        (403, ``admin_key_required``) with a key of another role."""
        secret = presented_key(headers.get("authorization"), headers.get("x-api-key"))
        if secret is None:
            raise AuthenticationFailed(OPERATOR_ONLY, code="missing_api_key")
        if self._is_admin(secret):  # compared in constant time, as digests
            return ADMIN
        caller = await self.authenticate(headers)  # 401: malformed, unknown, revoked, expired
        if caller.key.role == "operator":
            return caller.key.id
        raise PermissionDenied(OPERATOR_ONLY, code="admin_key_required")

    def _is_admin(self, secret: str) -> bool:
        given = hashlib.sha256(secret[:MAX_ADMIN_KEY_CHARS].encode("utf-8", "replace"))
        return len(secret) <= MAX_ADMIN_KEY_CHARS and hmac.compare_digest(
            given.digest(), self.admin_digest)
