"""``GET /ready``: can this router serve a request now? For a Kubernetes readiness probe.

A backend *serves* when its breaker is not open (closed, or half-open: a probe may go) and
the signal collector has not lost sight of it (``SignalStore.dark``: its last poll failed —
refused, errored or timed out — or its signals went stale). A backend that exposes no
metrics (engine kind ``openai``) or is not polled yet counts as seen, so its breaker alone
decides. A breaker cool-down that elapses while the collector still sees the engine down
does not make it serve again; the next good poll does.

200 when at least one backend serves, else 503; always 503 with status ``draining`` once a
graceful shutdown has begun (``api/drain.py``). Whatever does not serve says why in words
(``reason``): a backend (its breaker is open; the collector lost sight of it — the last
poll's error, or how old its signals are), a pool (every backend dark, every breaker open,
or the mix) and the whole router when nothing serves. The body, either way::

    {"status": "ready" | "unavailable" | "draining",
     "usable_backends": [backend_id, …],                  # the serving ones, config order
     "reason": str,                                       # only when nothing serves
     "pools": {pool: {"ready": bool, "serving": [backend_id, …],
                      "reason": str}},                    # only when not ready
     "backends": {backend_id: {"pool", "serving": bool,
                               "collector": "up" | "down" | "stale" | "unknown",
                               "breaker": "closed" | "half_open" | "open",
                               "reason": str}}}           # only when not serving
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmroute.anchor.store import SignalStore
from llmroute.api.gateway import gateway
from llmroute.api.responses import json_response
from llmroute.runtime import Runtime
from llmroute.types import BreakerState


async def ready(request: Request) -> Response:
    """``GET /ready``: 200 when some backend serves, else 503 (module docstring)."""
    body = readiness(request.app.state.runtime)
    if gateway(request).drain.active:
        body["status"] = "draining"
        return json_response(body, 503)
    return json_response(body, 200 if body["usable_backends"] else 503)


def readiness(rt: Runtime) -> dict[str, Any]:
    """The ``/ready`` body (module docstring) at ``rt.clock()``."""
    now = rt.clock()
    store = rt.signals
    dark = store.dark(now) if store is not None else frozenset()
    backends: dict[str, dict[str, Any]] = {}
    pools: dict[str, dict[str, Any]] = {}
    for b in rt.backends.values():
        breaker = rt.breaker.state(b.id, now)
        serving = b.id not in dark and breaker is not BreakerState.OPEN
        row = backends[b.id] = {"pool": b.pool, "serving": serving,
                                "collector": store.state(b.id, now) if store else "unknown",
                                "breaker": breaker.value}
        if not serving:
            row["reason"] = _why(store, b.id, now, breaker, b.id in dark)
        pool = pools.setdefault(b.pool, {"ready": False, "serving": []})
        if serving:
            pool["ready"] = True
            pool["serving"].append(b.id)
    for name, pool in pools.items():
        if not pool["ready"]:
            pool["reason"] = _pool_why([r for r in backends.values() if r["pool"] == name])
    usable = [bid for bid, row in backends.items() if row["serving"]]
    body = {"status": "ready" if usable else "unavailable", "usable_backends": usable,
            "pools": pools, "backends": backends}
    if not usable:
        body["reason"] = "no backend serves: " + "; ".join(
            f"pool {name}: {pool['reason']}" for name, pool in pools.items())
    return body


def _why(store: SignalStore | None, backend_id: str, now: float, breaker: BreakerState,
         dark: bool) -> str:
    """Why ``backend_id`` does not serve, in words."""
    parts = ["its circuit breaker is open"] if breaker is BreakerState.OPEN else []
    if dark and store is not None:
        entry, age = store.entry(backend_id), store.age(backend_id, now)
        if entry.state == "down":
            parts.append(f"dark: its last metrics poll failed ({entry.error})")
        else:
            parts.append(f"dark: its signals are {age or 0.0:.1f} s old "
                         f"(stale after {store.stale_after_s:g} s)")
    return "; ".join(parts) or "not serving"


def _pool_why(rows: list[dict[str, Any]]) -> str:
    """Why a pool with these backend rows (none serving) is not ready."""
    if not rows:
        return "it has no backend"
    dark = sum(r["collector"] in ("down", "stale") for r in rows)
    opened = sum(r["breaker"] == "open" for r in rows)
    if dark == len(rows):
        return f"every backend is dark ({len(rows)} of {len(rows)})"
    if opened == len(rows):
        return f"every backend's circuit breaker is open ({len(rows)} of {len(rows)})"
    return f"{dark} backend(s) dark, {opened} with an open circuit breaker"
