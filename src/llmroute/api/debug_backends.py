"""``GET /debug/backends``: every backend's signals with their age, scores and breaker state
(JSON; see ``anchor/report.py`` for the shape), and its quality ejection state and window
(``quality``: ``assemble.healing.Healing.report``; absent when not wired)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from llmroute.anchor.report import backends_report
from llmroute.anchor.store import SignalStore
from llmroute.api.responses import json_response
from llmroute.runtime import Runtime


async def debug_backends(request: Request) -> Response:
    """The anchor's view of every backend, now."""
    rt: Runtime = request.app.state.runtime
    now = rt.clock()
    store = rt.signals or SignalStore(rt.config.anchor.stale_after_s)
    report = backends_report(rt.backends, rt.profile, store, rt.stats.snapshot(now), now)
    quality = rt.healing.report() if rt.healing is not None else {}
    for row in report["backends"]:
        if row["id"] in quality:
            row["quality"] = quality[row["id"]]
    return json_response(report)
