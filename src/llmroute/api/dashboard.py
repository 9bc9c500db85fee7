"""``GET /dashboard``: the operator's live page (``dashboard.html``: plain HTML, CSS and
JavaScript with inline SVG; no CDN, no build step, works offline). The page itself holds no
data: its script polls ``/debug/backends``, ``/debug/fuse``, ``/debug/requests``,
``/metrics`` and ``/trace/{id}`` (behind the admin key or an operator key when auth is on:
the page asks for it once and keeps it for the browser tab)."""

from __future__ import annotations

import importlib.resources

from starlette.requests import Request
from starlette.responses import Response

PAGE = "dashboard.html"


async def dashboard(request: Request) -> Response:
    """The page, UTF-8 HTML (read from the package; a few tens of kB)."""
    page = importlib.resources.files("llmroute.api").joinpath(PAGE).read_bytes()
    return Response(page, media_type="text/html; charset=utf-8",
                    headers={"cache-control": "no-cache"})
