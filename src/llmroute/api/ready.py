"""``GET /ready``: can this router serve a request now? For a Kubernetes readiness probe.

A backend *serves* when its breaker is not open (closed, or half-open: a probe may go) and
the signal collector has not lost sight of it (``SignalStore.dark``: its last poll failed —
refused, errored or timed out — or its signals went stale). A backend that exposes no
metrics (engine kind ``openai``) or is not polled yet counts as seen, so its breaker alone
decides. A breaker cool-down that elapses while the collector still sees the engine down
does not make it serve again; the next good poll does.

200 when at least one backend serves, else 503; always 503 with status ``draining`` once a
graceful shutdown has begun (``api/drain.py``). The body, either way::

    {"status": "ready" | "unavailable" | "draining",
     "usable_backends": [backend_id, …],                  # the serving ones, config order
     "pools": {pool: {"ready": bool, "serving": [backend_id, …]}},
     "backends": {backend_id: {"pool", "serving": bool,
                               "collector": "up" | "down" | "stale" | "unknown",
                               "breaker": "closed" | "half_open" | "open"}}}
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.responses import json_response
from llmroute.runtime import Runtime
from llmroute.types import BreakerState


async def ready(request: Request) -> Response:
    """``GET /ready``: 200 when some backend serves, else 503 (module docstring)."""
    body = readiness(request.app.state.runtime)
    drain = getattr(request.app, "drain", None)
    if drain is not None and drain.active:
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
        backends[b.id] = {"pool": b.pool, "serving": serving,
                          "collector": store.state(b.id, now) if store else "unknown",
                          "breaker": breaker.value}
        pool = pools.setdefault(b.pool, {"ready": False, "serving": []})
        if serving:
            pool["ready"] = True
            pool["serving"].append(b.id)
    usable = [bid for bid, row in backends.items() if row["serving"]]
    return {"status": "ready" if usable else "unavailable", "usable_backends": usable,
            "pools": pools, "backends": backends}
