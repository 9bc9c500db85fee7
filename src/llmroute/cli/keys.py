"""Key and tenant commands on the key store the config names (``auth.keys_path``):

``llmroute keys create --tenant T [limits, --model/--pool/--strategy …, --priority,
--role inference|operator, --expires-in-days, --metadata JSON]`` prints the new key once, with its record;
``keys list [--tenant T]``, ``keys show ID``, ``keys revoke ID``, ``keys rotate ID`` (a new
secret with the same settings; the old key is revoked). ``llmroute tenants create ID
[limits]``, ``tenants list``, ``tenants show ID``. Every command prints JSON; a running
router sees a change within ``auth.cache_ttl_s`` (revocations through ``/admin/keys`` at once).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmroute.errors import InvalidRequest
from llmroute.policy.keys import ROLES, ApiKey, Limits, Tenant

if TYPE_CHECKING:
    from llmroute.config import Config
    from llmroute.policy.keystore_redis import AnyKeyStore

_LIMITS = ("rpm", "tpm", "daily_tokens", "monthly_tokens", "max_concurrency",
           "max_context_tokens")
_BUDGETS = ("daily_cost", "monthly_cost")


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``keys …`` and ``tenants …`` on the top-level subparsers."""
    keys = sub.add_parser("keys", help="create, list, show, revoke or rotate API keys")
    keys.set_defaults(policy_run=run)
    act = keys.add_subparsers(dest="keys_command", required=True)
    create = _with_limits(act.add_parser("create", help="make a key (shown once)"))
    create.add_argument("--tenant", required=True)
    create.add_argument("--name", default="")
    for many in ("model", "pool", "strategy"):
        create.add_argument(f"--{many}", action="append", default=[],
                            help=f"a {many} the key may use (repeat; none: any)")
    create.add_argument("--priority", default="standard")
    create.add_argument("--role", default="inference", choices=ROLES, help="operator: also "
                        "/debug/*, /metrics, traces and /admin/* (hand-offs, reload, "
                        "key management)")
    create.add_argument("--expires-in-days", type=float)
    create.add_argument("--metadata", default="{}", help="a JSON object")
    _common(act.add_parser("list", help="every key record")).add_argument("--tenant")
    for name in ("show", "revoke", "rotate"):
        _common(act.add_parser(name, help=f"{name} a key by id")).add_argument("key_id")
    tenants = sub.add_parser("tenants", help="create, list or show tenants")
    tenants.set_defaults(policy_run=run)
    tact = tenants.add_subparsers(dest="tenants_command", required=True)
    tcreate = _with_limits(tact.add_parser("create", help="create or update a tenant"))
    tcreate.add_argument("tenant_id")
    tcreate.add_argument("--metadata", default="{}", help="a JSON object")
    _common(tact.add_parser("list", help="every tenant"))
    _common(tact.add_parser("show", help="one tenant")).add_argument("tenant_id")


def _common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--config", type=Path, help="YAML config naming auth.keys_path")
    return p


def _with_limits(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for name in _LIMITS:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, help="none when omitted")
    for name in _BUDGETS:
        p.add_argument(f"--{name.replace('_', '-')}", type=_budget, help="a cost budget per "
                       "UTC day or month in the pools' price unit; none when omitted")
    return _common(p)


def _budget(text: str) -> float:
    """A cost budget from the command line: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"a budget must be a finite number above 0: {text}")
    return value


def run(config: Config, args: argparse.Namespace) -> int:
    """Run a ``keys`` or ``tenants`` command; returns the exit code. Raises InvalidRequest
    for an unknown tenant or key, or bad metadata."""
    from llmroute.policy.keystore_redis import open_key_store

    store = open_key_store(config.auth, config.state, config.limits.state_timeout_s)
    try:
        out = asyncio.run(_dispatch(store, args))
    finally:
        store.close()
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


async def _dispatch(store: AnyKeyStore, args: argparse.Namespace) -> Any:
    from llmroute.policy.issue import issue_key, rotate_key

    now = time.time()
    if args.command == "tenants":
        return await _tenants(store, args, now)
    cmd = args.keys_command
    if cmd == "create":
        expires = now + args.expires_in_days * 86400 if args.expires_in_days else None
        secret, key = await issue_key(
            store, args.tenant, now, name=args.name, limits=_limits(args),
            models=tuple(args.model), pools=tuple(args.pool), strategies=tuple(args.strategy),
            priority=args.priority, role=args.role, expires_at=expires, metadata=_metadata(args.metadata))
        return _shown_once(secret, key)
    if cmd == "list":
        return [_record(k) for k in await store.keys(args.tenant)]
    if cmd == "rotate":
        return _shown_once(*await rotate_key(store, args.key_id, now))
    if cmd == "revoke" and not await store.revoke(args.key_id, now):
        raise InvalidRequest(f"no active key {args.key_id!r}")
    key = await store.key(args.key_id)
    if key is None:
        raise InvalidRequest(f"no key {args.key_id!r}")
    return _record(key)


async def _tenants(store: AnyKeyStore, args: argparse.Namespace, now: float) -> Any:
    if args.tenants_command == "list":
        return [dataclasses.asdict(t) for t in await store.tenants()]
    if args.tenants_command == "create":
        old = await store.tenant(args.tenant_id)
        await store.put_tenant(Tenant(args.tenant_id, _limits(args), _metadata(args.metadata),
                                      old.created_at if old else now))
    tenant = await store.tenant(args.tenant_id)
    if tenant is None:
        raise InvalidRequest(f"no tenant {args.tenant_id!r}")
    return dataclasses.asdict(tenant)


def _shown_once(secret: str, key: ApiKey) -> dict[str, Any]:
    print("The key is shown only now; store it safely.", file=sys.stderr)
    return {"key": secret, "record": _record(key)}


def _record(key: ApiKey) -> dict[str, Any]:
    return {**dataclasses.asdict(key), "display": key.display}


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(**{name: getattr(args, name) for name in (*_LIMITS, *_BUDGETS)})


def _metadata(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"--metadata is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidRequest("--metadata must be a JSON object")
    return value
