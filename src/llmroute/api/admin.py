"""The admin API (``/admin/keys``) and the guard of the operator surfaces.

With auth on, ``operator(endpoint)`` lets a request through with the admin key or a key of
the ``operator`` role (``Policy.require_operator``: 401 without a key or with an unknown
one, 403 with an inference key) — every ``/admin/*`` route (key management, reload,
hand-offs), ``/debug/*``, traces and the dashboard's data; ``/metrics`` stays open when
``auth.metrics_open``. With auth off the surfaces are open as before and ``/admin/keys``
answers 404 (there is no key store). Every request that changes something (not GET) is
logged once as ``operator_action`` with who made it (``admin`` or the key's id, never a
secret), the method, path and status.

* ``GET /admin/keys[?tenant=…]`` — the key records (never a secret);
* ``POST /admin/keys`` — ``{"tenant", "name"?, "limits"?: {rpm, tpm, daily_tokens,
  monthly_tokens, max_concurrency, max_context_tokens, daily_cost, monthly_cost},
  "models"?, "pools"?, "strategies"?, "priority"?,
  "role"?: "inference"|"operator", "expires_at"? (epoch s), "metadata"?}`` → 201 ``{"key": <secret, shown once>, "record"}``;
* ``DELETE /admin/keys/{key_id}`` — revoke (effective at once on this replica);
* ``POST /admin/keys/{key_id}/rotate`` — 201 ``{"key": <new secret, shown once>,
  "record"}``: a new key with the same tenant and settings; the old one is revoked;
* ``POST /admin/reload`` — re-read the config file's pools, backends and routing
  (``assemble/reload.py``): 200 ``{"object": "reload", "outcome", "added", "removed",
  "changed", "kept", "ignored"}``, or 400 ``invalid_config`` / ``backend_unhealthy`` with
  the reason (the old backends keep serving). Open like the debug surfaces when auth is off; 404 when the
  app was not started by ``llmroute serve`` (nothing to reload).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.body import read_json
from llmroute.api.gateway import gateway
from llmroute.api.responses import json_response
from llmroute.errors import ConfigError, InvalidRequest, LLMRouteError, ModelNotFound
from llmroute.policy.gateway import Policy
from llmroute.policy.issue import issue_key, rotate_key
from llmroute.policy.keys import ApiKey, Limits
from llmroute.runtime import Runtime

Endpoint = Callable[[Request], Awaitable[Response]]
log = structlog.get_logger("llmroute.admin")


def operator(endpoint: Endpoint, *, metrics: bool = False) -> Endpoint:
    """``endpoint`` behind the admin key or an operator key when auth is on (``metrics``:
    open when ``auth.metrics_open``); changes are logged (module docstring)."""
    async def guarded(request: Request) -> Response:
        policy = request.app.state.runtime.policy
        who = None
        if policy is not None and not (metrics and policy.metrics_open):
            who = await policy.require_operator(request.headers)
        if request.method == "GET":
            return await endpoint(request)
        status = 500
        try:
            response = await endpoint(request)
            status = response.status_code
            return response
        except LLMRouteError as exc:
            status = exc.status
            raise
        finally:
            log.info("operator_action", by=who, method=request.method,
                     path=request.url.path, status=status)

    guarded.__doc__ = endpoint.__doc__
    return guarded


class _LimitsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    daily_tokens: int | None = Field(None, ge=1)
    monthly_tokens: int | None = Field(None, ge=1)
    max_concurrency: int | None = Field(None, ge=1)
    max_context_tokens: int | None = Field(None, ge=1)
    daily_cost: float | None = Field(None, gt=0, allow_inf_nan=False)
    monthly_cost: float | None = Field(None, gt=0, allow_inf_nan=False)


class KeyIn(BaseModel):
    """A new key's fields (``POST /admin/keys``)."""

    model_config = ConfigDict(extra="forbid")
    tenant: str = Field(min_length=1, max_length=128)
    name: str = Field("", max_length=256)
    limits: _LimitsIn = _LimitsIn()
    models: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    strategies: tuple[str, ...] = ()
    priority: str = "standard"
    role: Literal["inference", "operator"] = "inference"
    expires_at: float | None = None
    metadata: dict[str, Any] = {}


def record(key: ApiKey) -> dict[str, Any]:
    """A key's record as JSON (its id and display prefix, never its secret)."""
    return {**dataclasses.asdict(key), "display": key.display}


async def list_keys(request: Request) -> Response:
    """``GET /admin/keys``: every key record (``?tenant=`` narrows)."""
    policy = _policy(request)
    keys = await policy.keys.keys(request.query_params.get("tenant"))
    return json_response({"object": "list", "data": [record(k) for k in keys]})


async def create_key(request: Request) -> Response:
    """``POST /admin/keys``: a new key; the secret is in this answer only."""
    rt: Runtime = request.app.state.runtime
    policy = _policy(request)
    try:
        body = await read_json(request.receive, request.headers.get("content-type"),
                               request.headers.get("content-length"),
                               rt.config.server.max_body_bytes)
        spec = KeyIn.model_validate(body)
    except ValidationError as exc:
        raise InvalidRequest(f"bad key: {exc.errors()[0]['msg']}", param=".".join(
            str(p) for p in exc.errors()[0]["loc"])) from exc
    fields = spec.model_dump()
    tenant = fields.pop("tenant")
    fields["limits"] = Limits(**fields["limits"])
    secret, key = await issue_key(policy.keys, tenant, rt.wall_clock(), **fields)
    return json_response({"key": secret, "record": record(key)}, 201)


async def revoke_key(request: Request) -> Response:
    """``DELETE /admin/keys/{key_id}``: revoke the key; 404 when there is none active."""
    rt: Runtime = request.app.state.runtime
    policy = _policy(request)
    key_id = request.path_params["key_id"]
    if not await policy.keys.revoke(key_id, rt.wall_clock()):
        raise ModelNotFound(f"no active key {key_id!r}", param="key_id", code="key_not_found")
    policy.auth.forget()
    return json_response({"id": key_id, "object": "key", "revoked": True})


async def rotate(request: Request) -> Response:
    """``POST /admin/keys/{key_id}/rotate``: a new secret with the key's settings (shown in
    this answer only); the old key is revoked. 400 when there is no active such key."""
    rt: Runtime = request.app.state.runtime
    policy = _policy(request)
    secret, key = await rotate_key(policy.keys, request.path_params["key_id"],
                                   rt.wall_clock())
    policy.auth.forget()
    return json_response({"key": secret, "record": record(key)}, 201)


def _policy(request: Request) -> Policy:
    policy = request.app.state.runtime.policy
    if policy is None:
        raise ModelNotFound("the admin API needs auth.enabled", code="not_found")
    return policy


async def reload_config(request: Request) -> Response:
    """``POST /admin/reload``: apply the config file's backends (module docstring)."""
    reloader = gateway(request).reloader
    if reloader is None:
        raise ModelNotFound("this router cannot reload: it was not started by llmroute "
                            "serve", code="not_found")
    try:
        outcome = await reloader.reload()
    except ConfigError as exc:
        code = "backend_unhealthy" if exc.code == "backend_unhealthy" else "invalid_config"
        raise InvalidRequest(exc.message, code=code) from exc
    return json_response(outcome.as_json())
