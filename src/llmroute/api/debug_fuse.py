"""``GET /debug/fuse``: what the result fuse did.

Query: ``hours`` (look-back, default 24) and ``limit`` (recent events, default 50, ≤ 500).
Answer: ``counts`` per backend per hour and reason (``hour`` is the epoch second the hour
starts; the heatmap's cells), ``recent`` events newest first with their entropy curves
(``window``, nats per token), and per backend whether the entropy trigger is armed for a
chat request (``entropy_trigger``) and for a chat request with ``tools``
(``entropy_trigger_with_tools``), as the relay decides it (``fuse/arming.py``; a legacy
completion never arms it), with its settings.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.responses import json_response
from llmroute.errors import InvalidRequest
from llmroute.fuse.arming import entropy_armed
from llmroute.runtime import Runtime

_MAX_LIMIT = 500


async def debug_fuse(request: Request) -> Response:
    """The fuse's event counts, recent events and per-backend trigger settings."""
    rt: Runtime = request.app.state.runtime
    hours = _number(request, "hours", 24.0)
    limit = int(min(_number(request, "limit", 50), _MAX_LIMIT))
    since = rt.wall_clock() - hours * 3600
    return json_response({
        "hours": hours,
        "counts": await rt.fuse_events.hourly(since),
        "recent": await rt.fuse_events.recent(limit),
        "backends": {b.id: _trigger(rt, b.id) for b in rt.backends.values()},
    })


def _trigger(rt: Runtime, backend_id: str) -> dict[str, Any]:
    backend, fuse = rt.backends[backend_id], rt.config.fuse
    entropy = fuse.for_pool(backend.pool)
    return {"entropy_trigger": entropy_armed(fuse, backend, "chat", has_tools=False),
            "entropy_trigger_with_tools": entropy_armed(fuse, backend, "chat", has_tools=True),
            "threshold_nats": entropy.threshold_nats, "run_tokens": entropy.run_tokens}


def _number(request: Request, name: str, default: float) -> float:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise InvalidRequest(f"query parameter {name} must be a positive number", param=name)
    return value
