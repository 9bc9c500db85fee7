"""Response helpers (orjson bodies)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None
                  ) -> Response:
    """A JSON response serialised with orjson."""
    return Response(orjson.dumps(body), status, headers, media_type="application/json")
