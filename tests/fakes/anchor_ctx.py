"""Builders for anchor tests: backends, requests, contexts and engine signals."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import (
    Backend,
    BackendStats,
    BreakerView,
    ChatRequest,
    EngineSignals,
    Intent,
    MetricsSnapshot,
    QualityView,
)


def backends(*ids: str, pool: str = "p", engine: str = "vllm", ctx: int = 4096) -> list[Backend]:
    """One backend per id, all alike."""
    return [Backend(i, pool, engine, f"http://{i}", "m", ctx) for i in ids]


def request(text: str = "hi", prompt_tokens: int = 10, max_tokens: int | None = None,
            body: dict[str, Any] | None = None, has_tools: bool = False) -> ChatRequest:
    """A chat request with the given prompt size and body."""
    return ChatRequest("chat", body or {}, "auto", False, text, prompt_tokens, max_tokens, "r",
                       has_tools=has_tools)


def signals(taken_at: float = 0.0, **values: Any) -> EngineSignals:
    """Engine signals taken at ``taken_at`` (s) with ``values`` set."""
    return EngineSignals(taken_at, "test", **values)


def context(stats: dict[str, BackendStats] | None = None,
            engines: dict[str, EngineSignals] | None = None, *, req: ChatRequest | None = None,
            intent: Intent | None = None, now: float = 0.0,
            pools: frozenset[str] | None = None,
            breakers: Mapping[str, BreakerView] | None = None,
            hot: frozenset[str] = frozenset(),
            quality: Mapping[str, QualityView] | None = None) -> AnchorContext:
    """An AnchorContext over the given router stats, engine signals, breaker views, hot
    GPUs and quality views."""
    snap = MetricsSnapshot(stats or {}, now, engines or {}, breakers or {}, frozenset(), hot,
                           quality or {})
    return AnchorContext(req or request(), intent or Intent("chat", 1.0), snap, now, pools)
