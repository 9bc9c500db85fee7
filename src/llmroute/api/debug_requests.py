"""``GET /debug/requests``: the newest requests of the trace ring, newest first, as one line
each (what the dashboard's ``decisions`` lists; ``GET /trace/{request_id}`` has the rest).

Query: ``limit`` (default 50, 1-500). Answer: ``{"requests": [{request_id, at (epoch s),
status, duration_ms, intent, strategy, pool, backend, ttft_ms, tokens_in, tokens_out,
handoffs: [[backend, reason], …]}, …]}``; a field the request never reached is null.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.responses import json_response
from llmroute.errors import InvalidRequest
from llmroute.observe.trace import Trace
from llmroute.runtime import Runtime

MAX_LIMIT = 500
FIELDS = ("intent", "strategy", "pool", "backend", "ttft_ms", "tokens_in", "tokens_out")


async def debug_requests(request: Request) -> Response:
    """The newest traces' summaries. Raises InvalidRequest (400) for a bad ``limit``."""
    rt: Runtime = request.app.state.runtime
    raw = request.query_params.get("limit", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise InvalidRequest(f"query parameter limit must be an integer in 1-{MAX_LIMIT}",
                             param="limit")
    return json_response({"requests": [line(t) for t in rt.observer.ring.recent(int(raw))]})


def line(trace: Trace) -> dict[str, Any]:
    """One request's summary line (see the module docstring)."""
    s = trace.summary
    return {"request_id": trace.request_id, "at": trace.at, "status": trace.status,
            "duration_ms": round(trace.duration_ms, 3), **{k: s.get(k) for k in FIELDS},
            "handoffs": s.get("handoffs", [])}
