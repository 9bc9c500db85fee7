"""The ``observe:`` section of the configuration: traces, the per-request log line and the
decision audit (``observe/``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from llmroute.config.base import Strict


class AuditConfig(Strict):
    """The hash-chained decision audit (SQLite). ``path``: the database (None: off);
    ``retention_days``: records older than this are pruned (None: kept); ``queue``: records
    that may wait for the writer before new ones are dropped (and counted)."""

    path: str | None = None
    retention_days: float | None = Field(None, gt=0)
    queue: int = Field(10000, ge=1)


class OtlpConfig(Strict):
    """OpenTelemetry export of finished traces over OTLP/HTTP (protobuf). ``endpoint``: the
    collector's traces URL (e.g. ``http://otel-collector:4318/v1/traces``); ``headers``
    sent with each export; ``service_name``: the ``service.name`` resource attribute;
    ``timeout_s``: one export's limit; ``queue``: spans that may wait for the exporter's
    thread before new ones are dropped."""

    endpoint: str = Field(min_length=1)
    headers: dict[str, str] = {}
    service_name: str = "llmroute"
    timeout_s: float = Field(10.0, gt=0)
    queue: int = Field(8192, ge=1)


class TraceStoreConfig(Strict):
    """Finished traces kept in SQLite too, so ``GET /trace/{id}`` finds them after they
    leave the ring or the router restarts. ``path``: the database (None: off);
    ``retention_days``: older traces are pruned (None: kept); ``max_traces``: at most
    this many are kept (the oldest go first); ``queue``: traces that may wait for the
    writer before new ones are dropped (and counted)."""

    path: str | None = None
    retention_days: float | None = Field(7.0, gt=0)
    max_traces: int = Field(100_000, ge=1)
    queue: int = Field(10000, ge=1)


class ObserveConfig(Strict):
    """``trace_ring``: finished traces kept in memory for ``GET /trace/{id}`` (0: none);
    ``log_requests``: one structured log line per request; ``log_prompts``: that line
    carries the prompt and answer text too (off: never logged); ``log_format``: how
    ``llmroute serve`` writes its log lines on stderr, ``json`` (one object per line; the
    cheap one, ~10 µs a line) or ``console`` (key=value for reading by eye, ~35 µs);
    ``audit``: see
    AuditConfig; ``otlp``: see OtlpConfig (None: no export); ``trace_store``: see
    TraceStoreConfig."""

    trace_ring: int = Field(1000, ge=0)
    log_requests: bool = True
    log_prompts: bool = False
    log_format: Literal["json", "console"] = "json"
    audit: AuditConfig = AuditConfig()
    otlp: OtlpConfig | None = None
    trace_store: TraceStoreConfig = TraceStoreConfig()
