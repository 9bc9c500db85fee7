"""The whole config file: ``Config`` and ``load_config`` / ``parse_config``.

One YAML file holds the server settings, timeouts, retry budget, pools, backends (remote
engines by ``base_url``, or local llama.cpp engines by ``launch``) and the intent → pool map;
the other sections' models are in the package's other modules (``config/__init__.py`` lists
them); the engine kinds a backend may name, in ``backends/engines.py``. With no file, the
embedded default (``local/default.yaml``) starts three local engines.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from llmroute.backends.engines import ENGINES, Capability, engine_kind
from llmroute.config.anchor import AnchorConfig
from llmroute.config.base import Strict
from llmroute.config.cache import CacheConfig
from llmroute.config.discovery import DiscoveryConfig
from llmroute.config.engine import GpuConfig, LaunchConfig
from llmroute.config.filter import ContentFilterConfig
from llmroute.config.observe import ObserveConfig
from llmroute.config.price import PriceConfig
from llmroute.config.policy import (
    AuthConfig,
    LimitsConfig,
    PriorityConfig,
    ResponsesConfig,
    StateConfig,
    TokenizerConfig,
    TokensConfig,
)
from llmroute.config.quality import QualityConfig
from llmroute.config.quirks import QuirksConfig
from llmroute.config.server import ServerConfig
from llmroute.config.yaml import Problem, describe, read_yaml, validation_problems
from llmroute.errors import ConfigError

_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class TimeoutConfig(Strict):
    """Upstream timeouts in seconds: TCP connect, time to first token (TTFT), inter-token
    stall (ITL limit) and the whole request."""

    connect_s: float = Field(5.0, gt=0)
    ttft_s: float = Field(120.0, gt=0)
    stall_s: float = Field(30.0, gt=0)
    total_s: float = Field(600.0, gt=0)


class RetryConfig(Strict):
    """Failover before the first byte: at most ``max_attempts`` backends per request,
    exponential back-off ``backoff_base_s · 2^k`` capped at ``backoff_max_s``, full jitter."""

    max_attempts: int = Field(3, ge=1, le=10)
    backoff_base_s: float = Field(0.02, ge=0)
    backoff_max_s: float = Field(1.0, ge=0)


class BreakerConfig(Strict):
    """Circuit breaker per backend: closed → open when, over the last ``window_s`` seconds,
    at least ``min_requests`` attempts ended and the failed fraction (0–1) reached
    ``failure_rate``; open → half-open after ``cooldown_s`` seconds; half-open admits
    ``half_open_probes`` concurrent probes and closes after that many successes (a failed
    probe re-opens it)."""

    window_s: float = Field(30.0, gt=0)
    min_requests: int = Field(5, ge=1)
    failure_rate: float = Field(0.5, gt=0, le=1)
    cooldown_s: float = Field(5.0, gt=0)
    half_open_probes: int = Field(1, ge=1)


class EntropyConfig(Strict):
    """The entropy trigger for one pool: hand off after ``run_tokens`` consecutive tokens
    whose estimated entropy exceeds ``threshold_nats`` (nats; see docs/fuse.md for the
    estimator and the calibration behind the defaults)."""

    threshold_nats: float = Field(3.2, gt=0)
    run_tokens: int = Field(3, ge=1)


class SlowConfig(Strict):
    """The slow-stream trigger (``fuse/pace.py``): hand a stream off when, over the last
    ``window_s`` seconds, it brought fewer than ``min_tokens_per_s`` tokens a second (None:
    no floor), or when its projected finish misses its priority class's ``e2e_target_s``."""

    min_tokens_per_s: float | None = Field(None, gt=0)
    window_s: float = Field(2.0, gt=0, le=600)


class DegradationConfig(Strict):
    """Degradation tiers for the pool a strategy plans, by its health (0–1, see
    ``fuse/degrade.py``):
    ≥ ``healthy`` → the planned pool; ≥ ``degraded`` → ``lighter_pool``; below → the
    ``canned_answer`` when set, else 503 with ``Retry-After: retry_after_s``."""

    healthy: float = Field(0.95, ge=0, le=1)
    degraded: float = Field(0.80, ge=0, le=1)
    lighter_pool: str | None = None
    canned_answer: str | None = None
    retry_after_s: float = Field(5.0, gt=0)


class FuseConfig(Strict):
    """The result fuse: ``enabled`` turns the entropy trigger on (failure handoffs always
    run); ``top_logprobs`` alternatives are requested per token (1–20); ``pools`` overrides
    ``entropy`` per pool name; ``degradation`` maps a planned pool's name to its tiers;
    ``events_path`` is the SQLite file for fuse events (``:memory:`` keeps them in memory);
    ``prewarm`` keeps the next candidate's prompt cache warm (the conversation plus the text
    so far, re-sent every ``prewarm_tokens`` streamed tokens; see ``dispatch/relay.py``) so a
    handoff's continuation prefills only the last few tokens; without it,
    ``warm_on_suspect`` does the same only while a high-entropy run is under way (the first
    sign of trouble, before the trip); ``slow`` the slow-stream trigger."""

    enabled: bool = True
    prewarm: bool = False
    prewarm_tokens: int = Field(32, ge=1)
    warm_on_suspect: bool = True
    top_logprobs: int = Field(5, ge=1, le=20)
    entropy: EntropyConfig = EntropyConfig()
    pools: dict[str, EntropyConfig] = {}
    degradation: dict[str, DegradationConfig] = {}
    events_path: str = ":memory:"
    slow: SlowConfig = SlowConfig()

    def for_pool(self, pool: str) -> EntropyConfig:
        """The entropy trigger settings for ``pool``."""
        return self.pools.get(pool, self.entropy)


class BackendConfig(Strict):
    """One engine endpoint of kind ``engine`` (a name in ``backends/engines.py``). Either
    ``base_url`` (a running engine; the part before ``/v1``) or ``launch`` (llmroute starts
    a local llama.cpp engine) must be given. The bearer token is ``api_key``, or read from
    the environment variable named by ``api_key_env``. ``mode``: ``chat`` (chat and legacy
    completions) or ``embeddings`` (the backend serves ``POST /v1/embeddings`` only; every
    backend of its pool must be one too). ``tokenizer``: a tokenizer file that counts its
    prompts (else its engine kind's tokenize endpoint, if any). ``ttft_s`` / ``stall_s``
    override ``timeouts.ttft_s`` / ``timeouts.stall_s`` for this backend. ``quirks``
    overrides what its engine kind accepts in a request body (``config/quirks.py``).
    ``kv_events``: the ZeroMQ endpoint where the engine publishes vLLM's KV-cache events
    (vLLM ``--kv-events-config`` with the ZMQ publisher, e.g. ``tcp://10.0.0.5:5557``); the
    anchor subscribes and matches prompts on the engine's own blocks (``docs/prefix.md``)."""

    id: str = Field(pattern=_ID)
    pool: str
    engine: str
    base_url: str | None = Field(None, pattern=r"^https?://")
    model: str = "smollm2-135m-instruct"
    context_length: int | None = Field(None, ge=1)
    api_key: str | None = None
    api_key_env: str | None = None
    launch: LaunchConfig | None = None
    gpu: GpuConfig | None = None
    capabilities: tuple[Capability, ...] | None = None
    mode: Literal["chat", "embeddings"] = "chat"
    tokenizer: TokenizerConfig | None = None
    ttft_s: float | None = Field(None, gt=0)
    stall_s: float | None = Field(None, gt=0)
    quirks: QuirksConfig | None = None
    kv_events: str | None = Field(None, pattern=r"^(tcp|ipc)://")

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, engine: str) -> str:
        if engine not in ENGINES:
            raise ValueError(f"unknown engine kind {engine!r} (known: {', '.join(ENGINES)})")
        return engine

    @model_validator(mode="after")
    def _endpoint(self) -> BackendConfig:
        if (self.base_url is None) == (self.launch is None):
            raise ValueError("give exactly one of base_url (a running engine) or launch")
        if self.launch is not None and not engine_kind(self.engine).launch:
            launchable = ", ".join(k for k, row in ENGINES.items() if row.launch)
            raise ValueError(f"launch is only supported for engine: {launchable}")
        return self

    def effective_context(self) -> int:
        """Context window per request in tokens: explicit, else ctx_size/slots, else 4096."""
        if self.context_length is not None:
            return self.context_length
        if self.launch is not None:
            return self.launch.ctx_size // self.launch.slots
        return 4096


class PoolConfig(Strict):
    """A named group of interchangeable backends; ``strengths`` are the intent labels it
    serves well and ``max_complexity`` (0.1–5.0) the hardest request it suits (intent-fit);
    ``price`` what its tokens cost (``config/price.py``; None: not priced, costs nothing)."""

    description: str = ""
    strengths: tuple[str, ...] = ()
    max_complexity: float | None = Field(None, gt=0)
    price: PriceConfig | None = None


class RoutingConfig(Strict):
    """``default_pool`` serves intents not in ``intents`` (intent label → pool name).
    ``cross_pool_fallback``: a request whose ``model`` names a pool may fall back to other
    pools' backends when that pool's cannot serve (default false: it fails with a 503 naming
    the pool)."""

    default_pool: str
    intents: dict[str, str] = {}
    cross_pool_fallback: bool = False


class RouterHeadConfig(Strict):
    """The gate's win head (docs/cost-routing.md): ``data``, an outcome file (one JSON
    object a line: prompt or messages, and per pool a flag or a 1–10 score), and ``pools``,
    the ladder cheapest first (at least two; the last is the reference). Fitted at the
    gate's start, or read back when ``llmroute gate fit-router`` fitted the same file."""

    data: str
    pools: tuple[str, ...] = Field(min_length=2)


class GateConfig(Strict):
    """The semantic gate (docs/gate.md). ``kind``: ``semantic`` (fast n-gram head, fine-tuned
    encoder as second opinion), ``rules`` (keywords only) or ``off`` (no classification:
    every request gets the default intent). ``rules``: intent → regex list,
    applied after the model as overrides (hot-reloaded from the config file).
    ``utterances``: intent → extra example prompts (a new intent name adds an intent).
    ``second_opinion_below``: fast-stage confidence (0–1) under which the encoder is asked;
    ``composite_margin``: top-two probability gap (0–1) under which the verdict is composite;
    ``cache_size`` entries kept ``cache_ttl_s`` seconds; ``max_wait_ms``/``max_batch``: how long
    an idle encoder waits for company (ms; 0: starts at once, requests that arrive while a
    batch runs still share the next) and the batch size; ``encoder``: false skips the fine-tuned encoder;
    ``cache_dir``: folder for the fitted heads (empty: ``$LLMROUTE_CACHE/gate``, default
    ``~/.cache/llmroute/gate``), read on start instead of refitting when nothing they depend
    on changed. ``router``: the win head (``RouterHeadConfig``; none by default)."""

    kind: Literal["semantic", "rules", "off"] = "semantic"
    rules: dict[str, list[str]] = {}
    utterances: dict[str, list[str]] = {}
    second_opinion_below: float = Field(0.9, ge=0, le=1)
    composite_margin: float = Field(0.15, ge=0, le=1)
    cache_size: int = Field(4096, ge=0)
    cache_ttl_s: float = Field(300.0, gt=0)
    max_wait_ms: float = Field(0.0, ge=0)
    max_batch: int = Field(32, ge=1, le=256)
    encoder: bool = True
    cache_dir: str = ""
    router: RouterHeadConfig | None = None

    @field_validator("kind", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        """YAML 1.1 reads a bare ``off`` as the boolean false: accept it as ``"off"``."""
        return "off" if v is False else v


class StrategiesConfig(Strict):
    """Strategy files (docs/strategies.md): ``dir`` holds one YAML or JSON strategy a file
    (a relative path is read from the config file's folder, the embedded default's from the
    ``llmroute.local`` package); ``watch`` reloads changed files while serving;
    ``handoffs_path`` is the SQLite ticket queue of the ``human`` kind (``:memory:``: kept
    for the process's lifetime only)."""

    dir: str = Field(min_length=1)
    watch: bool = True
    handoffs_path: str = Field("llmroute-handoffs.sqlite3", min_length=1)


class Config(Strict):
    """The whole configuration; ``source`` is the file it came from (for messages);
    ``strategies`` absent: every request gets the built-in ``single`` strategy."""

    server: ServerConfig = ServerConfig()
    timeouts: TimeoutConfig = TimeoutConfig()
    retry: RetryConfig = RetryConfig()
    breaker: BreakerConfig = BreakerConfig()
    anchor: AnchorConfig = AnchorConfig()
    fuse: FuseConfig = FuseConfig()
    quality: QualityConfig = QualityConfig()
    pools: dict[str, PoolConfig] = Field(min_length=1)
    backends: list[BackendConfig] = []
    discovery: list[DiscoveryConfig] = []
    routing: RoutingConfig
    gate: GateConfig = GateConfig()
    auth: AuthConfig = AuthConfig()
    limits: LimitsConfig = LimitsConfig()
    state: StateConfig = StateConfig()
    responses: ResponsesConfig = ResponsesConfig()
    priority: PriorityConfig = PriorityConfig()
    tokens: TokensConfig = TokensConfig()
    content_filter: ContentFilterConfig = ContentFilterConfig()
    cache: CacheConfig = CacheConfig()
    strategies: StrategiesConfig | None = None
    observe: ObserveConfig = ObserveConfig()
    source: str = "<memory>"


def _reference_problems(cfg: Config) -> list[Problem]:
    """Cross-references pydantic cannot see: ``[(loc, message), …]``, empty when sound."""
    problems = _entry_problems(cfg, "backends", "id", "backend id")
    if cfg.routing.default_pool not in cfg.pools:
        problems.append((("routing", "default_pool"), _unknown_pool(cfg.routing.default_pool, cfg)))
    for intent, pool in cfg.routing.intents.items():
        if pool not in cfg.pools:
            problems.append((("routing", "intents", intent), _unknown_pool(pool, cfg)))
    for name, tiers in cfg.fuse.degradation.items():
        for loc, pool in (((name,), name), ((name, "lighter_pool"), tiers.lighter_pool)):
            if pool is not None and pool not in cfg.pools:
                problems.append((("fuse", "degradation", *loc), _unknown_pool(pool, cfg)))
    for name in cfg.pools:
        if not any(b.pool == name for b in (*cfg.backends, *cfg.discovery)):
            problems.append((("pools", name), "pool has no backends"))
    return problems + _mode_problems(cfg) + _discovery_problems(cfg)


def _entry_problems(cfg: Config, section: str, key: str, what: str) -> list[Problem]:
    """A repeated ``key`` (named ``what`` in the message) or an unknown pool among the
    entries of list ``section`` (``backends`` or ``discovery``)."""
    problems: list[Problem] = []
    entries = getattr(cfg, section)
    keys = [getattr(e, key) for e in entries]
    for i, e in enumerate(entries):
        if keys.index(keys[i]) != i:
            problems.append(((section, i, key), f"duplicate {what} {keys[i]!r}"))
        if e.pool not in cfg.pools:
            problems.append(((section, i, "pool"), _unknown_pool(e.pool, cfg)))
    return problems


def _discovery_problems(cfg: Config) -> list[Problem]:
    """At least one backend or discovery entry; each entry's template makes a sound
    backend of a known pool; id prefixes are distinct."""
    if not cfg.backends and not cfg.discovery:
        return [(("backends",), "List should have at least 1 item (or give discovery)")]
    problems = _entry_problems(cfg, "discovery", "id_prefix", "id_prefix")
    for i, d in enumerate(cfg.discovery):
        try:
            BackendConfig.model_validate(d.backend("192.0.2.1", None))
        except ValidationError as exc:
            problems += [(("discovery", i, *loc[-1:]), msg)
                         for loc, msg in validation_problems(exc)]
    return problems


def _mode_problems(cfg: Config) -> list[Problem]:
    """A pool is all chat or all embeddings backends, and chat routing names chat pools."""
    modes: dict[str, str] = {}
    problems: list[Problem] = []
    for i, b in enumerate(cfg.backends):
        first = modes.setdefault(b.pool, b.mode)
        if b.mode != first:
            problems.append((("backends", i, "mode"), f"pool {b.pool!r} mixes {first} and "
                             f"{b.mode} backends; give embeddings their own pool"))
    chat = [(("routing", "default_pool"), cfg.routing.default_pool),
            *((("routing", "intents", k), p) for k, p in cfg.routing.intents.items())]
    for loc, pool in chat:
        if modes.get(pool) == "embeddings":
            problems.append((loc, f"pool {pool!r} serves embeddings, not chat"))
    return problems


def _unknown_pool(name: str, cfg: Config) -> str:
    return f"unknown pool {name!r} (pools: {', '.join(cfg.pools)})"


RELOADED_SECTIONS = ("pools", "backends", "routing")
"""The config sections a reload applies without a restart (``POST /admin/reload``,
``SIGHUP``, ``llmroute reload``: ``assemble/reload.py``)."""

EMBEDDED = "<embedded default>"
"""``Config.source`` of the embedded default (``local/default.yaml``)."""


def load_config(path: str | Path | None = None) -> Config:
    """Load and validate a YAML config; ``None`` loads the embedded default.

    Raises ConfigError whose message names ``file:line: field: problem`` for YAML syntax
    errors, unreadable files and every validation error.
    """
    if path is None:
        ref = importlib.resources.files("llmroute.local") / "default.yaml"
        return parse_config(ref.read_text(encoding="utf-8"), EMBEDDED)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc
    return parse_config(text, str(path))


def parse_config(text: str, source: str) -> Config:
    """Validate YAML ``text``; ``source`` names it in error messages. Raises ConfigError."""
    data, root = read_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}:1: the top level must be a mapping")
    try:
        cfg = Config.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise ConfigError(describe(validation_problems(exc), root, source)) from exc
    problems = _reference_problems(cfg)
    if problems:
        raise ConfigError(describe(problems, root, source))
    return cfg
