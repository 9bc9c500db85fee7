"""Config → the gateway policies (``policy.gateway.Policy``), or None with auth off."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping

from llmroute.config import Config
from llmroute.errors import ConfigError
from llmroute.policy.auth import Authenticator
from llmroute.policy.gateway import Policy
from llmroute.policy.keystore import KeyStore
from llmroute.policy.limits import Limiter
from llmroute.state.memory import MemoryStore


def build_policy(config: Config, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 environ: Mapping[str, str] | None = None) -> Policy | None:
    """The policies of ``config`` (keys in ``auth.keys_path``, state in this process), or
    None when ``auth.enabled`` is false. No I/O: the key store opens on first use. Raises
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
    keys = KeyStore(auth.keys_path)
    store = MemoryStore(clock)
    return Policy(Authenticator(keys, auth.cache_ttl_s, auth.cache_size, clock, wall_clock),
                  Limiter(store, config.limits, wall_clock), keys, store,
                  hashlib.sha256(admin.encode("utf-8")).digest(), auth.metrics_open)
