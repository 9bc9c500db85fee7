"""What the anchor knows about every backend, as plain JSON-ready data (``/debug/backends``).

Per backend: identity, breaker state (from the snapshot's breaker views), capabilities (does
it give logprobs), the collector's view of its metrics endpoint, whether it is dark or hot
and how old its signals are, every engine/GPU signal with its age and whether it is stale,
the router's own counters, and every scorer's score with the weighted total. Scores are
those of a neutral request (empty prompt, intent ``chat`` with confidence 0) ranked within
the backend's pool, so request-dependent scorers (prefix-affinity, intent-fit) show their
baseline. Times: ``age_s`` in seconds on the router's monotonic clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from llmroute.anchor.profile import Profile
from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.sources.signals import SIGNALS
from llmroute.anchor.store import SignalStore
from llmroute.backends.engines import capabilities_of
from llmroute.types import Backend, BreakerView, ChatRequest, Intent, MetricsSnapshot

NEUTRAL = Intent("chat", 0.0)


def backends_report(backends: Mapping[str, Backend], profile: Profile, store: SignalStore,
                    snapshot: MetricsSnapshot, now: float) -> dict[str, Any]:
    """The whole report (see the module docstring); ``snapshot`` from ``RouterStats``."""
    scores = neutral_scores(backends, profile, snapshot, now)
    return {
        "now_s": now, "stale_after_s": store.stale_after_s,
        "weights": {s.name: w for s, w in profile.scorers},
        "picker": profile.picker.name,
        "backends": [_backend(b, store, snapshot, scores.get(b.id, ({}, None)), now)
                     for b in backends.values()],
    }


def _backend(b: Backend, store: SignalStore, snap: MetricsSnapshot,
             scored: tuple[dict[str, float | None], float | None], now: float) -> dict[str, Any]:
    caps = capabilities_of(b)
    stats = snap.stats.get(b.id)
    return {
        "id": b.id, "pool": b.pool, "engine": b.engine, "base_url": b.base_url,
        "model": b.model, "context_length": b.context_length,
        "breaker": snap.breakers.get(b.id, BreakerView()).state(now).value,
        "logprobs": "logprobs" in caps, "capabilities": sorted(caps),
        "collector": _collector(store, b.id, now),
        "dark": b.id in snap.dark, "hot": b.id in snap.hot,
        "signals_age_s": store.age(b.id, now),
        "signals": _signals(store, b.id, now),
        "router": asdict(stats) if stats is not None else None,
        "scores": scored[0], "total": scored[1],
    }


def _collector(store: SignalStore, bid: str, now: float) -> dict[str, Any]:
    e = store.entry(bid)
    return {"state": e.state, "failures": e.failures, "error": e.error,
            "polled_age_s": None if e.polled_at is None else max(now - e.polled_at, 0.0),
            "source": e.signals.source if e.signals is not None else None}


def _signals(store: SignalStore, bid: str, now: float) -> dict[str, Any]:
    signals = store.entry(bid).signals
    if signals is None:
        return {}
    age = store.age(bid, now)
    stale = not store.is_fresh(bid, now)
    return {name: {"value": getattr(signals, name), "age_s": age, "stale": stale}
            for name in SIGNALS
            if getattr(signals, name) is not None or name in signals.missing}


def neutral_scores(backends: Mapping[str, Backend], profile: Profile,
                   snapshot: MetricsSnapshot, now: float
                   ) -> dict[str, tuple[dict[str, float | None], float | None]]:
    """Per backend id: ``({scorer: score in [0, 1] or None}, weighted total or None)`` for a
    neutral request ranked within the backend's pool (``/debug/backends``, and the score
    gauges of ``/metrics``)."""
    request = ChatRequest("chat", {}, "auto", False, "", 1, None, "debug")
    ctx = AnchorContext(request, NEUTRAL, snapshot, now)
    out: dict[str, tuple[dict[str, float | None], float | None]] = {}
    for pool in dict.fromkeys(b.pool for b in backends.values()):
        members = [b for b in backends.values() if b.pool == pool]
        totals, parts = profile.score(ctx, members)
        for b in members:
            out[b.id] = ({n: p.get(b.id) for n, p in parts.items()}, totals[b.id])
    return out
