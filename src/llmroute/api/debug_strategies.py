"""``GET /debug/strategies``: the loaded strategy set and the last reload's outcome.

Answers ``{"dir", "builtin", "strategies": [{"strategy_id", "version", "header", "kind",
"priority", "description", "source", "when", "fallback_strategy"}, …], "last_reload":
{"outcome", "at", "messages", "applied", "retired", "refused"}}``; strategies best first
(the order matching tries them in); ``when`` lists only the conditions given.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.responses import json_response
from llmroute.runtime import Runtime
from llmroute.strategy.snapshot import Entry


async def debug_strategies(request: Request) -> Response:
    """The current strategy set and ``status`` of the strategy book."""
    rt: Runtime = request.app.state.runtime
    book = rt.strategy
    current = book.current
    return json_response({
        "dir": book.directory,
        "builtin": current.builtin.header,
        "strategies": [_entry(e) for e in current.entries],
        "last_reload": asdict(book.status),
    })


def _entry(e: Entry) -> dict[str, Any]:
    spec = e.spec
    return {"strategy_id": spec.strategy_id, "version": spec.version, "header": e.header,
            "kind": spec.kind, "priority": spec.priority, "description": spec.description,
            "source": e.source, "when": spec.when.model_dump(exclude_defaults=True),
            "fallback_strategy": spec.fallback_strategy}
