"""The ``observe:`` section of the configuration: traces, the per-request log line and the
decision audit (``observe/``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditConfig(_Strict):
    """The hash-chained decision audit (SQLite). ``path``: the database (None: off);
    ``retention_days``: records older than this are pruned (None: kept); ``queue``: records
    that may wait for the writer before new ones are dropped (and counted)."""

    path: str | None = None
    retention_days: float | None = Field(None, gt=0)
    queue: int = Field(10000, ge=1)


class ObserveConfig(_Strict):
    """``trace_ring``: finished traces kept in memory for ``GET /trace/{id}`` (0: none);
    ``log_requests``: one structured log line per request; ``log_prompts``: that line
    carries the prompt and answer text too (off: never logged); ``audit``: see
    AuditConfig."""

    trace_ring: int = Field(1000, ge=0)
    log_requests: bool = True
    log_prompts: bool = False
    audit: AuditConfig = AuditConfig()
