"""Configuration: pydantic models and YAML loading whose errors name ``file:line: field``.

One YAML file holds the server settings, timeouts, retry budget, pools, backends (remote
engines by ``base_url``, or local llama.cpp engines by ``launch``) and the intent → pool map.
With no file, the embedded default (``local/default.yaml``) starts three local engines.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmroute.errors import ConfigError

EngineKind = Literal["vllm", "sglang", "llamacpp", "ollama", "openai", "emulator"]
_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Strict):
    """HTTP server: bind address and ``max_body_bytes`` (bytes, default 4 MiB)."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)


class TimeoutConfig(_Strict):
    """Upstream timeouts in seconds: TCP connect, time to first token (TTFT), inter-token
    stall (ITL limit) and the whole request."""

    connect_s: float = Field(5.0, gt=0)
    ttft_s: float = Field(120.0, gt=0)
    stall_s: float = Field(30.0, gt=0)
    total_s: float = Field(600.0, gt=0)


class RetryConfig(_Strict):
    """Failover before the first byte: at most ``max_attempts`` backends per request,
    exponential back-off ``backoff_base_s · 2^k`` capped at ``backoff_max_s``, full jitter."""

    max_attempts: int = Field(3, ge=1, le=10)
    backoff_base_s: float = Field(0.02, ge=0)
    backoff_max_s: float = Field(1.0, ge=0)


class BreakerConfig(_Strict):
    """Circuit breaker: open after ``failure_threshold`` consecutive failures, half-open
    after ``cooldown_s`` seconds, close after one successful probe."""

    failure_threshold: int = Field(3, ge=1)
    cooldown_s: float = Field(5.0, gt=0)


class LaunchConfig(_Strict):
    """A local llama.cpp engine llmroute starts itself: ``ctx_size`` tokens of KV cache shared
    by ``slots`` parallel sequences, ``threads`` CPU threads."""

    ctx_size: int = Field(4096, ge=256)
    slots: int = Field(1, ge=1, le=64)
    threads: int = Field(1, ge=1)
    extra_args: tuple[str, ...] = ()


class BackendConfig(_Strict):
    """One engine endpoint. Either ``base_url`` (a running engine; the part before ``/v1``)
    or ``launch`` (llmroute starts a local llama.cpp engine) must be given. The bearer token
    is ``api_key``, or read from the environment variable named by ``api_key_env``."""

    id: str = Field(pattern=_ID)
    pool: str
    engine: EngineKind
    base_url: str | None = Field(None, pattern=r"^https?://")
    model: str = "smollm2-135m-instruct"
    context_length: int | None = Field(None, ge=1)
    api_key: str | None = None
    api_key_env: str | None = None
    launch: LaunchConfig | None = None

    @model_validator(mode="after")
    def _endpoint(self) -> BackendConfig:
        if (self.base_url is None) == (self.launch is None):
            raise ValueError("give exactly one of base_url (a running engine) or launch")
        if self.launch is not None and self.engine != "llamacpp":
            raise ValueError("launch is only supported for engine: llamacpp")
        return self

    def effective_context(self) -> int:
        """Context window per request in tokens: explicit, else ctx_size/slots, else 4096."""
        if self.context_length is not None:
            return self.context_length
        if self.launch is not None:
            return self.launch.ctx_size // self.launch.slots
        return 4096


class PoolConfig(_Strict):
    """A named group of interchangeable backends."""

    description: str = ""


class RoutingConfig(_Strict):
    """``default_pool`` serves intents not in ``intents`` (intent label → pool name)."""

    default_pool: str
    intents: dict[str, str] = {}


class Config(_Strict):
    """The whole configuration; ``source`` is the file it came from (for messages)."""

    server: ServerConfig = ServerConfig()
    timeouts: TimeoutConfig = TimeoutConfig()
    retry: RetryConfig = RetryConfig()
    breaker: BreakerConfig = BreakerConfig()
    pools: dict[str, PoolConfig] = Field(min_length=1)
    backends: list[BackendConfig] = Field(min_length=1)
    routing: RoutingConfig
    source: str = "<memory>"


def _reference_problems(cfg: Config) -> list[tuple[tuple[Any, ...], str]]:
    """Cross-references pydantic cannot see: ``[(loc, message), …]``, empty when sound."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    ids = [b.id for b in cfg.backends]
    for i, b in enumerate(cfg.backends):
        if ids.index(b.id) != i:
            problems.append((("backends", i, "id"), f"duplicate backend id {b.id!r}"))
        if b.pool not in cfg.pools:
            problems.append((("backends", i, "pool"), _unknown_pool(b.pool, cfg)))
    if cfg.routing.default_pool not in cfg.pools:
        problems.append((("routing", "default_pool"), _unknown_pool(cfg.routing.default_pool, cfg)))
    for intent, pool in cfg.routing.intents.items():
        if pool not in cfg.pools:
            problems.append((("routing", "intents", intent), _unknown_pool(pool, cfg)))
    for name in cfg.pools:
        if not any(b.pool == name for b in cfg.backends):
            problems.append((("pools", name), "pool has no backends"))
    return problems


def _unknown_pool(name: str, cfg: Config) -> str:
    return f"unknown pool {name!r} (pools: {', '.join(cfg.pools)})"


def load_config(path: str | Path | None = None) -> Config:
    """Load and validate a YAML config; ``None`` loads the embedded default.

    Raises ConfigError whose message names ``file:line: field: problem`` for YAML syntax
    errors, unreadable files and every validation error.
    """
    if path is None:
        ref = importlib.resources.files("llmroute.local") / "default.yaml"
        return parse_config(ref.read_text(encoding="utf-8"), "<embedded default>")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc
    return parse_config(text, str(path))


def parse_config(text: str, source: str) -> Config:
    """Validate YAML ``text``; ``source`` names it in error messages. Raises ConfigError."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}:{_yaml_line(exc)}: invalid YAML: {_yaml_problem(exc)}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{source}:1: the top level must be a mapping")
    try:
        cfg = Config.model_validate({**data, "source": source})
    except ValidationError as exc:
        problems = [(_clean_loc(e["loc"]), e["msg"]) for e in exc.errors()]
        raise ConfigError(_describe(problems, root, source)) from exc
    problems = _reference_problems(cfg)
    if problems:
        raise ConfigError(_describe(problems, root, source))
    return cfg


def _describe(problems: list[tuple[tuple[Any, ...], str]], root: yaml.Node | None,
              source: str) -> str:
    """One ``file:line: field: message`` line per problem."""
    lines = []
    for loc, msg in problems:
        field = ".".join(str(p) for p in loc) or "(top level)"
        lines.append(f"{source}:{_line_of(root, loc)}: {field}: {msg}")
    return "\n".join(lines)


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(p for p in loc if not _is_pydantic_tag(p))


def _is_pydantic_tag(part: Any) -> bool:
    return isinstance(part, str) and ("[" in part or part.startswith("function-"))


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """1-based line of the deepest YAML node that ``loc`` reaches (its key for mappings)."""
    line = node.start_mark.line + 1 if node is not None else 1
    for part in loc:
        child = _child(node, part)
        if child is None:
            break
        line, node = child
    return line


def _child(node: yaml.Node | None, part: Any) -> tuple[int, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                return key.start_mark.line + 1, value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        item = node.value[part]
        return item.start_mark.line + 1, item
    return None


def _yaml_line(exc: yaml.YAMLError) -> int:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else 1


def _yaml_problem(exc: yaml.YAMLError) -> str:
    return str(getattr(exc, "problem", None) or exc)
