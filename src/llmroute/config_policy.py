"""The ``auth:`` and ``limits:`` sections of the configuration (gateway policies,
docs/policies.md).

Keys, tenants and their limits live in the key store (``llmroute keys …``), not here; this
file names the store, the admin key's environment variable and the admission settings.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuthConfig(_Strict):
    """API keys. ``enabled``: every OpenAI endpoint needs a key (``Authorization: Bearer``
    or ``x-api-key``), and the operator surfaces (``/debug/*``, ``/admin/*``, ``/metrics``
    unless ``metrics_open``) need the admin key, read at start-up from the environment
    variable named by ``admin_key_env`` (the router refuses to start without it).
    ``keys_path``: the SQLite key store. Keys looked up are cached in memory for
    ``cache_ttl_s`` seconds (a revocation takes effect within that), at most ``cache_size``
    of them."""

    enabled: bool = False
    keys_path: str = "llmroute-keys.sqlite3"
    admin_key_env: str = "LLMROUTE_ADMIN_KEY"
    metrics_open: bool = False
    cache_ttl_s: float = Field(5.0, gt=0)
    cache_size: int = Field(10_000, ge=1)


class LimitsConfig(_Strict):
    """Admission. A request reserves its prompt tokens plus ``max_tokens`` (when absent:
    ``default_max_tokens``) against TPM and quotas, reconciled with real usage when the
    answer ends. A concurrency lease lapses after ``lease_ttl_s`` seconds even unreleased
    (a crashed replica's). ``state_timeout_s`` bounds each state-store call."""

    default_max_tokens: int = Field(512, ge=1)
    lease_ttl_s: float = Field(900.0, gt=0)
    state_timeout_s: float = Field(0.25, gt=0)
