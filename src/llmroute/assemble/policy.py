"""Config → the gateway policies (``policy.gateway.Policy``), or None with auth off; their
state store (``state:``): in this process, or Redis behind the fail-open guard."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping

from llmroute.anchor.stats.router import RouterStats

from prometheus_client import CollectorRegistry

from llmroute.config import Config
from llmroute.errors import ConfigError
from llmroute.policy.auth import Authenticator
from llmroute.policy.gateway import Policy
from llmroute.policy.limits import Limiter
from llmroute.policy.load import fleet_headroom
from llmroute.policy.priority import PriorityGate
from llmroute.policy.priority_metrics import PriorityMetrics
from llmroute.state.guard import Guarded
from llmroute.state.memory import MemoryStore
from llmroute.state.protocol import StateStore
from llmroute.state.responses import ResponseStore, SqliteResponses


def build_policy(config: Config, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 environ: Mapping[str, str] | None = None,
                 registry: CollectorRegistry | None = None) -> Policy | None:
    """The policies of ``config`` (keys in ``auth.key_store``, state as ``build_store``
    says; the store's outage counts join ``registry``), or None when ``auth.enabled`` is
    false; with ``auth.jwt`` JWT callers too (their metrics on ``registry``). No I/O: the
    key store opens, Redis connects and the JWKS is read on first use. Raises
    ConfigError when auth is on and the admin key's environment variable is unset or empty
    (the operator surfaces would be either open or unreachable)."""
    auth = config.auth
    if not auth.enabled:
        return None
    admin = (os.environ if environ is None else environ).get(auth.admin_key_env, "")
    if not admin:
        raise ConfigError(f"{config.source}: auth.admin_key_env: auth is enabled but the "
                          f"environment variable {auth.admin_key_env} (the admin key) is "
                          "not set")
    from llmroute.policy.keystore_redis import open_key_store  # redis-py: only with auth on

    keys = open_key_store(auth, config.state, config.limits.state_timeout_s)
    store = build_store(config, clock)
    if registry is not None and isinstance(store, Guarded):
        registry.register(store)
    jwt = None
    if auth.jwt is not None:  # PyJWT and its cryptography: only with JWT callers
        from llmroute.policy.jwks import Jwks, JwtMetrics
        from llmroute.policy.jwt import JwtAuthenticator

        metrics = JwtMetrics(registry)
        jwt = JwtAuthenticator(auth.jwt, Jwks(auth.jwt, metrics, clock), keys, metrics,
                               auth.cache_ttl_s, clock, wall_clock)
    return Policy(Authenticator(keys, auth.cache_ttl_s, auth.cache_size, clock, wall_clock),
                  Limiter(store, config.limits, wall_clock), keys, store,
                  hashlib.sha256(admin.encode("utf-8")).digest(), auth.metrics_open, jwt)


def build_store(config: Config, clock: Callable[[], float] = time.monotonic) -> StateStore:
    """``state.kind: memory``: a MemoryStore on ``clock``; ``redis``: a RedisStore at
    ``state.url`` (Redis's clock; each call bounded by ``limits.state_timeout_s``) behind
    ``Guarded`` (``clock`` paces its retries). No I/O."""
    state = config.state
    if state.kind == "memory" or state.url is None:
        return MemoryStore(clock)
    from llmroute.state.redis import RedisStore  # redis-py: only with a shared state

    redis = RedisStore(state.url, config.limits.state_timeout_s, prefix=state.prefix,
                       pool_size=state.pool_size)
    return Guarded(redis, fail_closed=state.fail_closed, retry_s=state.retry_s, clock=clock)


def build_responses(config: Config) -> ResponseStore:
    """The store of ``/v1/responses`` answers (``responses:``): in the Redis of ``state:``
    with ``state.kind: redis`` (every replica reads it), else in the SQLite file
    ``responses.path``. No I/O: both open on first use."""
    r, state = config.responses, config.state
    if state.kind == "redis" and state.url is not None:
        from llmroute.state.responses_redis import RedisResponses

        return RedisResponses(state.url, config.limits.state_timeout_s, r.ttl_s,
                              r.max_entries, prefix=state.prefix)
    return SqliteResponses(r.path, r.ttl_s, r.max_entries)


def build_priority(config: Config, stats: RouterStats, clock: Callable[[], float],
                   registry: CollectorRegistry) -> PriorityGate | None:
    """The admission gate of ``priority.classes`` over every backend's load (``stats``
    snapshots against ``priority.watermarks``), its metrics on ``registry``; None without
    classes (the request path then has no priority step at all)."""
    prio = config.priority
    if not prio.classes:
        return None
    ids = [b.id for b in config.backends]
    metrics = PriorityMetrics(registry, [c.name for c in prio.classes])
    return PriorityGate(prio, fleet_headroom(stats.snapshot, clock, ids, prio.watermarks),
                        prio.watermarks.in_flight * len(ids), metrics, clock)
