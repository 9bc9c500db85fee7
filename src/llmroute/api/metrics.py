"""``GET /metrics``: the app's Prometheus registry in text exposition format."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from llmroute.observe.metrics import CONTENT_TYPE
from llmroute.runtime import Runtime


async def metrics(request: Request) -> Response:
    """Every metric family of this app (``observe/metrics.py``)."""
    rt: Runtime = request.app.state.runtime
    return Response(rt.metrics.render(), media_type=CONTENT_TYPE)
