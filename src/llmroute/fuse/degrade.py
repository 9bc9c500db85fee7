"""Degradation tiers by pool health (seed 003), pure.

Pool health (0–1) is the mean over the pool's backends of ``1 − failure rate`` in the
breaker's window, a backend whose breaker is open counting 0. With a pool's
``DegradationConfig``: health ≥ ``healthy`` (0.95) → serve as planned; ≥ ``degraded``
(0.80) → serve from ``lighter_pool`` first (the rest stays as fallback); below → answer with
the ``canned_answer`` when one is configured, else 503 with ``Retry-After``. A pool without
a configuration is never degraded.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

import structlog

from llmroute.config import DegradationConfig
from llmroute.errors import NoBackendAvailable
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.types import Backend, BreakerState, Candidate, ChatRequest

log = structlog.get_logger("llmroute.degrade")


class Tier(enum.Enum):
    """Which tier serves: the planned pool, the lighter pool, or shed load."""

    PRIMARY = "primary"
    LIGHTER = "lighter"
    SHED = "shed"


def pool_health(breaker: CircuitBreaker, backend_ids: Iterable[str], now: float) -> float:
    """Health of a pool (0–1, see the module docstring); 1.0 for an empty pool."""
    scores = [0.0 if breaker.state(b, now) is BreakerState.OPEN
              else 1.0 - breaker.failure_rate(b, now) for b in backend_ids]
    return sum(scores) / len(scores) if scores else 1.0


def tier(health: float, config: DegradationConfig | None) -> Tier:
    """The tier for a pool of ``health`` (0–1) under ``config`` (None: never degraded)."""
    if config is None or health >= config.healthy:
        return Tier.PRIMARY
    if health >= config.degraded:
        return Tier.LIGHTER if config.lighter_pool is not None else Tier.PRIMARY
    return Tier.SHED


def tiered(candidates: list[Candidate], pool: str, health: float,
           config: DegradationConfig | None, request_id: str | None = None
           ) -> list[Candidate] | None:
    """``candidates`` for a pool of ``health`` (0–1): as given (primary tier), the lighter
    pool's backends first (lighter tier), or None for the canned answer (logged with the
    ``request_id`` it befell). Raises NoBackendAvailable (503 with ``Retry-After``) when
    shedding load without one."""
    chosen = tier(health, config)
    if chosen is Tier.PRIMARY or config is None:
        return candidates
    log.warning("pool_degraded", pool=pool, health=round(health, 3), tier=chosen.value,
                request_id=request_id)
    if chosen is Tier.LIGHTER:
        light = [c for c in candidates if c.backend.pool == config.lighter_pool]
        return light + [c for c in candidates if c not in light]
    if config.canned_answer is None:
        raise NoBackendAvailable(f"pool {pool} is degraded (health {health:.0%})",
                                 retry_after_s=config.retry_after_s)
    return None


_NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def canned_backend(pool: str) -> Backend:
    """Stands for the canned tier in the route headers (``x-llmroute-backend: canned``)."""
    return Backend("canned", pool, "canned", "", "canned", 0)


def canned_completion(request: ChatRequest, config: DegradationConfig, created: int
                      ) -> dict[str, Any]:
    """The canned answer as a non-streamed answer in the endpoint's OpenAI shape;
    ``created`` is the wall-clock time in epoch seconds."""
    chat = request.endpoint == "chat"
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if chat:
        choice["message"] = {"role": "assistant", "content": config.canned_answer}
    else:
        choice["text"] = config.canned_answer
    return {**_head(request, "chat.completion" if chat else "text_completion", created),
            "choices": [choice], "llmroute": {"degraded": Tier.SHED.value},
            "usage": dict(_NO_USAGE)}


def canned_chunks(request: ChatRequest, config: DegradationConfig, created: int
                  ) -> list[dict[str, Any]]:
    """The canned answer as stream chunks: the text, then the finish chunk, then (when the
    client asked, ``stream_options.include_usage``) a usage chunk: no engine ran, 0 tokens."""
    chat = request.endpoint == "chat"
    head = _head(request, "chat.completion.chunk" if chat else "text_completion", created)

    def choice(text: str | None, finish: str | None) -> dict[str, Any]:
        if not chat:
            return {"index": 0, "text": text or "", "finish_reason": finish}
        delta = {} if text is None else {"role": "assistant", "content": text}
        return {"index": 0, "delta": delta, "finish_reason": finish}

    chunks = [{**head, "choices": [choice(config.canned_answer, None)]},
              {**head, "choices": [choice(None, "stop")],
               "llmroute": {"degraded": Tier.SHED.value}}]
    options = request.body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        chunks.append({**head, "choices": [], "usage": dict(_NO_USAGE)})
    return chunks


def _head(request: ChatRequest, obj: str, created: int) -> dict[str, Any]:
    return {"id": f"chatcmpl-{request.request_id}", "object": obj, "created": created,
            "model": request.model}
