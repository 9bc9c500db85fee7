"""Shared plumbing for scorers: read one backend's signals from the context, and build the
``{backend_id: score}`` map that leaves out backends whose signal is missing."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.sources.signals import EngineSignals
from llmroute.types import Backend, BackendStats


def engine(ctx: AnchorContext, backend_id: str) -> EngineSignals | None:
    """The backend's fresh engine/GPU signals, or None when absent or stale."""
    return ctx.snapshot.engines.get(backend_id)


def stats(ctx: AnchorContext, backend_id: str) -> BackendStats:
    """The router's own stats for the backend (empty stats when never used)."""
    return ctx.snapshot.stats.get(backend_id) or BackendStats(backend_id)


def present(candidates: Sequence[Backend],
            value: Callable[[str], float | None]) -> dict[str, float]:
    """``{backend_id: value(id)}`` for every candidate whose value is not None."""
    out = {}
    for b in candidates:
        v = value(b.id)
        if v is not None:
            out[b.id] = v
    return out
