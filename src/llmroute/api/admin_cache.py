"""``POST /admin/cache/purge`` (an operator surface: ``admin.operator``): remove answer
cache entries, on this replica and — with the cache shared through Redis — on every other.

Body: ``{"tenant": "<id>"}`` (a tenant's entries), ``{"tenant": "<id>", "key_id": "<id>"}``
or ``{"key_id": "<id>"}`` (one key's), or ``{"all": true}`` (every entry). Answers 200
``{"object": "cache.purge", "removed": <entries removed here>, "shared": <bool>}``; 400
for a body naming nothing (an empty purge is refused, not read as "all"), 404 when the
cache is off.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.body import read_json
from llmroute.api.responses import json_response
from llmroute.errors import InvalidRequest, ModelNotFound


class PurgeIn(BaseModel):
    """What to purge (module docstring)."""

    model_config = ConfigDict(extra="forbid")
    tenant: str | None = Field(None, min_length=1, max_length=128)
    key_id: str | None = Field(None, min_length=1, max_length=128)
    all: bool = False


async def purge_cache(request: Request) -> Response:
    """``POST /admin/cache/purge`` (module docstring)."""
    rt = request.app.state.runtime
    cache = rt.cache
    if cache is None:
        raise ModelNotFound("the answer cache is off (cache.enabled)", code="not_found")
    try:
        what = PurgeIn.model_validate(await read_json(
            request.receive, request.headers.get("content-type"),
            request.headers.get("content-length"), rt.config.server.max_body_bytes))
    except ValidationError as exc:
        raise InvalidRequest(f"purge: {exc.errors()[0]['msg']}", param=".".join(
            str(p) for p in exc.errors()[0]["loc"]) or None) from exc
    if not what.all and what.tenant is None and what.key_id is None:
        raise InvalidRequest('purge: name a "tenant", a "key_id", or "all": true',
                             param="body")
    removed = cache.purge(None if what.all else what.tenant, None if what.all else what.key_id)
    return json_response({"object": "cache.purge", "removed": removed,
                          "shared": cache.sharing})
