"""The ``auth:``, ``limits:``, ``state:`` and ``responses:`` sections of the configuration (gateway policies,
docs/policies.md).

Keys, tenants and their limits live in the key store (``llmroute keys …``), not here; this
file names the store, the admin key's environment variable and the admission settings.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from llmroute.config.base import Strict

REDIS_SCHEMES = ("redis", "rediss", "unix")


JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                  "ES512", "EdDSA")
"""The asymmetric JWS algorithms a JWT caller's token may use (RFC 7518, RFC 8037); never
``none`` and never an HMAC one (the router holds no shared secret)."""


class JwtClaimsConfig(Strict):
    """Which claims of a verified token name the caller (docs/policies.md, "JWT callers"):
    ``tenant`` its tenant (required in the token; the tenant's limits apply), ``key`` who it
    is (required: its trace and audit name it ``jwt:<value>``; when the value is the id of
    a key in the key store, of the same tenant, that key's limits, models, pools,
    strategies and priority apply), ``roles`` its roles (a list or a space-separated
    string; ``operator`` opens the operator surfaces), ``priority`` its priority class."""

    tenant: str = Field("tenant", min_length=1)
    key: str = Field("sub", min_length=1)
    roles: str = Field("roles", min_length=1)
    priority: str = Field("priority", min_length=1)


class JwtConfig(Strict):
    """JWT callers beside API keys: a bearer token signed by ``issuer`` for ``audience``
    with one of ``algorithms``, verified against the keys of the JWKS at ``jwks_url`` (or
    the file ``jwks_file``), ``exp``/``nbf``/``iat`` checked with ``leeway_s`` of clock skew.
    The JWKS is read again every ``refresh_s`` seconds (in the background) and, for a token
    naming an unknown ``kid``, at most once per ``min_refresh_s``; each read waits at most
    ``timeout_s``. While the JWKS cannot be read the keys last read keep verifying tokens
    for ``keys_ttl_s`` seconds after that read, then every token is refused (401
    ``jwks_unavailable``, counted in ``llmroute_jwt_refusals_total``). A verified token is
    remembered for ``auth.cache_ttl_s`` (never past its ``exp``), at most ``cache_size``."""

    issuer: str = Field(min_length=1)
    audience: str | list[str]
    jwks_url: str | None = None
    jwks_file: str | None = None
    algorithms: list[Literal[JWT_ALGORITHMS]] = ["RS256", "ES256", "EdDSA"]  # type: ignore[valid-type]
    leeway_s: float = Field(30.0, ge=0, le=600)
    refresh_s: float = Field(300.0, gt=0)
    min_refresh_s: float = Field(30.0, ge=0)
    keys_ttl_s: float = Field(3600.0, gt=0)
    timeout_s: float = Field(5.0, gt=0, le=60)
    cache_size: int = Field(10_000, ge=1)
    claims: JwtClaimsConfig = JwtClaimsConfig()

    @model_validator(mode="after")
    def _one_source(self) -> JwtConfig:
        if (self.jwks_url is None) == (self.jwks_file is None):
            raise ValueError("auth.jwt needs exactly one of jwks_url and jwks_file")
        if not self.algorithms:
            raise ValueError("auth.jwt.algorithms must name at least one algorithm")
        return self


class AuthConfig(Strict):
    """API keys. ``enabled``: every OpenAI endpoint needs a key (``Authorization: Bearer``
    or ``x-api-key``), and the operator surfaces (``/debug/*``, ``/admin/*``, ``/trace``,
    ``/metrics`` unless ``metrics_open``) need the admin key, read at start-up from the
    environment variable named by ``admin_key_env`` (the router refuses to start without
    it), or a key of the ``operator`` role.
    ``keys_path``: the SQLite key store. Keys looked up are cached in memory for
    ``cache_ttl_s`` seconds (a revocation takes effect within that), at most ``cache_size``
    of them. ``key_store``: ``sqlite`` (default, ``keys_path``) or ``redis`` (with
    ``state: {kind: redis}``: one key store for every replica, ``policy/keystore_redis.py``;
    digests only, as in SQLite). ``jwt``: bearer JWTs from an identity provider are
    accepted beside keys (``JwtConfig``)."""

    enabled: bool = False
    key_store: Literal["sqlite", "redis"] = "sqlite"
    keys_path: str = "llmroute-keys.sqlite3"
    admin_key_env: str = "LLMROUTE_ADMIN_KEY"
    metrics_open: bool = False
    cache_ttl_s: float = Field(5.0, gt=0)
    cache_size: int = Field(10_000, ge=1)
    jwt: JwtConfig | None = None


class LimitsConfig(Strict):
    """Admission. A request reserves its prompt tokens plus ``max_tokens`` (when absent:
    ``default_max_tokens``) against TPM and quotas, reconciled with real usage when the
    answer ends. A concurrency lease lapses after ``lease_ttl_s`` seconds even unreleased
    (a crashed replica's). ``state_timeout_s`` bounds each state-store call."""

    default_max_tokens: int = Field(512, ge=1)
    lease_ttl_s: float = Field(900.0, gt=0)
    state_timeout_s: float = Field(0.25, gt=0)


class StateConfig(Strict):
    """Where the limits' shared state lives (docs/policies.md). ``kind: memory`` (default):
    in this process, for one replica. ``kind: redis``: in the Redis at ``url``
    (``redis://[:password@]host[:port][/db]``, ``rediss://`` for TLS, ``unix:///path``),
    shared by every replica; keys under ``prefix`` (no ``{``/``}``: hash tags are the
    names' own), at most ``pool_size`` connections. Each call is bounded by
    ``limits.state_timeout_s``; when Redis cannot answer, limits are not enforced
    (``fail_closed: false``, the default) or requests are refused with 503
    (``fail_closed: true``), and only one call per ``retry_s`` seconds tries Redis again
    until it answers. With ``kind: redis`` the replicas also share their router-side load
    (``share_load``: in-flight requests and pending prefill per backend, every
    ``load_interval_s`` seconds; ``state/load.py``) and poll each engine's ``/metrics`` once
    for the fleet (``share_polls``; ``state/polls.py``) and share their prefix indexes
    (``share_prefix``: what each replica sent where, every ``prefix_interval_s`` seconds;
    ``state/prefix.py``)."""

    kind: Literal["memory", "redis"] = "memory"
    url: str | None = None
    prefix: str = Field("llmroute:", pattern=r"^[^{}]*$")
    pool_size: int = Field(64, ge=1, le=10_000)
    fail_closed: bool = False
    retry_s: float = Field(1.0, ge=0)
    share_load: bool = True
    load_interval_s: float = Field(0.05, gt=0, le=10)
    share_polls: bool = True
    share_prefix: bool = True
    prefix_interval_s: float = Field(0.1, gt=0, le=10)

    @field_validator("url")
    @classmethod
    def _redis_url(cls, v: str | None) -> str | None:
        if v is not None:
            problem = redis_url_problem(v)
            if problem:
                raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _url_for_redis(self) -> StateConfig:
        if self.kind == "redis" and self.url is None:
            raise ValueError("state.kind redis needs state.url (redis://host:port/db)")
        return self


class ResponsesConfig(Strict):
    """Stored answers of ``/v1/responses`` (``store: true``, OpenAI's default), read back by
    ``previous_response_id`` and ``GET``/``DELETE /v1/responses/{id}``, each visible only to
    its tenant (docs/surfaces.md). With ``state.kind: memory`` they live in the SQLite file
    ``path`` (``:memory:``: this process only); with ``state.kind: redis`` in that Redis,
    shared by every replica. Each is kept ``ttl_s`` seconds (30 days, as OpenAI keeps
    them), at most ``max_entries`` of them (the oldest go first); an answer whose record
    (the conversation so far and the answer) is larger than ``max_bytes`` is answered but
    not stored."""

    path: str = "llmroute-responses.sqlite3"
    ttl_s: float = Field(30 * 86400.0, gt=0)
    max_entries: int = Field(100_000, ge=1)
    max_bytes: int = Field(4 * 1024 * 1024, ge=1024)


def redis_url_problem(url: str) -> str | None:
    """Why ``url`` is not a Redis URL (never quoting its password), or None when it is."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "not a Redis URL (redis://[:password@]host[:port][/db])"
    if parts.scheme not in REDIS_SCHEMES:
        return (f"scheme {parts.scheme or '(none)'!r} is not one of "
                f"{', '.join(REDIS_SCHEMES)} (redis://[:password@]host[:port][/db])")
    if parts.scheme == "unix":
        return None if parts.path else "a unix:// Redis URL needs a socket path"
    if not parts.hostname:
        return "a Redis URL needs a host (redis://host:port/db)"
    if port == 0:
        return "a Redis URL's port must be 1-65535"
    db = parts.path.strip("/")
    if db and not db.isdigit():
        return f"the Redis database must be a number, not {db!r}"
    return None


class PriorityClassConfig(Strict):
    """One SLO priority class: its ``name`` and its time-to-first-token target in seconds
    (``ttft_target_s``: a request's deadline is its arrival plus this); ``e2e_target_s``
    (None: none), the seconds from arrival by which a streamed answer should be whole — a
    stream whose projected finish misses it is handed off (``fuse/pace.py``)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    ttft_target_s: float = Field(gt=0)
    e2e_target_s: float | None = Field(None, gt=0)


class WatermarksConfig(Strict):
    """When a backend counts as saturated: ``in_flight`` requests the router has sent it
    (router stats), or, from its polled signals when it has them, ``queue`` requests
    waiting in the engine or ``kv`` (0–1) of its KV cache in use."""

    in_flight: int = Field(8, ge=1)
    queue: int | None = Field(None, ge=0)
    kv: float | None = Field(None, gt=0, le=1)


class PriorityConfig(Strict):
    """SLO priority classes and the admission queue (docs/policies.md). ``classes`` in
    order, highest first (empty: no priority step at all); a key's ``priority`` names its
    class (``default_class`` when it names none configured, and with auth off); a request
    may choose with the ``x-llmroute-priority`` header when its key's metadata has
    ``priority_header: true`` (always with auth off when ``header_without_auth``). When
    every backend is saturated (``watermarks``) requests wait, at most ``max_queue`` of
    them, each at most ``max_wait_s``; the queue is re-checked every ``tick_s`` seconds."""

    classes: list[PriorityClassConfig] = Field(default_factory=list)
    default_class: str | None = None
    header_without_auth: bool = True
    watermarks: WatermarksConfig = WatermarksConfig()
    max_queue: int = Field(256, ge=1)
    max_wait_s: float = Field(30.0, gt=0)
    tick_s: float = Field(0.05, gt=0)

    @model_validator(mode="after")
    def _known_default(self) -> PriorityConfig:
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"priority.classes: duplicate class names in {names}")
        if self.default_class is not None and self.default_class not in names:
            raise ValueError(f"priority.default_class {self.default_class!r} is not one of "
                             f"the classes {names}")
        return self


class TokenizerConfig(Strict):
    """A backend's own tokenizer file: ``hf_file`` is a Hugging Face ``tokenizer.json``
    (read with the ``tokenizers`` package at start-up). Counts the messages' text plus the
    estimate's per-message overhead (no chat template)."""

    hf_file: str = Field(min_length=1)


class TokensConfig(Strict):
    """Counting prompt tokens (docs/policies.md, "Context length"). The character estimate
    (``text.py``) decides unless the prompt, with its output budget, is within
    ``margin`` (a fraction) of a context limit: then the engine's tokenizer counts it, within
    ``timeout_ms`` (falling back to the estimate, noted in the trace), cached per (backend
    model, prompt digest) for the last ``cache_size`` prompts. ``auto_clamp_max_tokens``:
    a request whose ``max_tokens`` does not fit gets ``max_tokens`` lowered to what fits
    instead of a 400 (when at least ``min_output_tokens`` still fit). ``template_tokens``:
    what a chat template may add to a chat (default system prompt, generation prompt) for a
    backend whose own is not learned (``policy/template.py``: learned from each engine's
    tokenizer at start; Ollama and hosted APIs have none); ``image_tokens``: an image part's
    tokens, a stated upper bound (LLaVA-NeXT's most, 5 × 576 = 2,880, is above OpenAI's
    high-detail rule, at most 85 + 170 × 8 tiles = 1,445, and Gemma 3's 256, LLaVA-1.5's 576,
    Llama 3.2 Vision's 1,601; raise it for models that tile without a cap, such as
    Qwen2-VL at a large ``max_pixels``)."""

    margin: float = Field(0.25, ge=0, le=10)
    timeout_ms: float = Field(50.0, gt=0, le=60_000)
    cache_size: int = Field(1024, ge=0, le=1_000_000)
    auto_clamp_max_tokens: bool = False
    min_output_tokens: int = Field(16, ge=1)
    template_tokens: int = Field(64, ge=0, le=100_000)
    image_tokens: int = Field(2880, ge=0, le=1_000_000)
