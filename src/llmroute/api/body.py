"""Reading a JSON request body safely: Content-Type, size limit, JSON syntax."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import ClientDisconnect
from starlette.types import Receive

from llmroute.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType


async def read_json(receive: Receive, content_type: str | None, content_length: str | None,
                    limit_bytes: int) -> Any:
    """The parsed JSON body, read from the ASGI ``receive`` channel; ``content_type`` and
    ``content_length`` are the request's header values (None when absent). Raises
    UnsupportedMediaType (415), PayloadTooLarge (413), InvalidRequest (400, malformed
    JSON) or ClientDisconnect (the client left first)."""
    _check_content_type(content_type)
    raw = await _read_limited(receive, content_length, limit_bytes)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"We could not parse the JSON body of your request: {exc}",
                             code="invalid_json") from exc


def _check_content_type(value: str | None) -> None:
    media = (value or "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType(
            f"Content-Type must be application/json (got {value or 'none'!r})",
            param="content-type")


async def _read_limited(receive: Receive, declared: str | None, limit: int) -> bytes:
    """The body's bytes, read straight from the ASGI ``receive`` channel (what Starlette's
    ``Request.stream`` does, without an async generator per request). Raises
    PayloadTooLarge past ``limit`` bytes (or a ``declared`` length over it), ClientDisconnect
    when the client leaves first."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            raise _too_large(limit)
        parts.append(part)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes")
