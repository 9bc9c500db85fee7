"""Exception handlers: every error leaves as an OpenAI-shaped JSON body with a 4xx/5xx."""

from __future__ import annotations

import math
import re

import structlog
import uuid_utils
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from llmroute.errors import (
    LLMRouteError,
    NoBackendAvailable,
    RateLimited,
    ShuttingDown,
    to_openai,
)
from llmroute.api.responses import json_response

log = structlog.get_logger("llmroute.api")

_HTTP_TYPES = {404: ("not_found_error", "not_found"),
               405: ("invalid_request_error", "method_not_allowed")}


def request_id(request: Request) -> str:
    """The request's id: the client's ``x-request-id``, else one made up once per request."""
    scope = request.scope
    rid = scope.get(_SCOPE_KEY)
    return rid if rid is not None else keep_request_id(scope, request.headers.get("x-request-id"))


_KEPT_ID = re.compile(r"(?!\.\.?\Z)[^\x00-\x20\x7f-\U0010ffff/\\?#%]{1,128}\Z")
"""A client id the router keeps (``REQUEST_ID_RULE``) — one ``GET /trace/{id}`` can name, an
engine's HTTP parser accepts and a log line shows as sent."""
REQUEST_ID_RULE = "1-128 visible ASCII characters, none of / \\ ? # %, not . or .."
"""``_KEPT_ID`` in words, for the messages that refuse another id."""


def keep_request_id(scope: Scope, given: str | None) -> str:
    """The request's id, kept in the ASGI ``scope`` (not request.state: its misses raise)
    so every answer names the same one: the one kept already, else the request's
    ``x-request-id`` value ``given`` when ``_KEPT_ID`` matches it (a 10 kB or non-ASCII id
    is not forwarded to the engines, echoed or logged), else ``new_request_id()``."""
    rid = scope.get(_SCOPE_KEY)
    if rid is None:
        rid = scope[_SCOPE_KEY] = given if is_request_id(given) else new_request_id()
    return rid


def is_request_id(text: str | None) -> bool:
    """Whether ``text`` is an id the router keeps (``_KEPT_ID``): the only ids a request,
    a trace or an audit record can carry, so ``GET /trace/{id}`` refuses any other (400)."""
    return text is not None and _KEPT_ID.match(text) is not None


def new_request_id() -> str:
    """A new request id: a UUIDv7 (RFC 9562 §5.7) as 32 hex digits, 48 bits of Unix time in
    ms, then 74 random bits. Ids made here sort by arrival, so the decision audit's
    ``request_id`` index grows at its right edge instead of rewriting a random page per
    record (a third of a record's insert cost); they are unique, not secret, and valid W3C
    trace ids."""
    return uuid_utils.uuid7().hex


_SCOPE_KEY = "llmroute.request_id"


async def on_llmroute_error(request: Request, exc: Exception) -> Response:
    """LLMRouteError → its OpenAI body. A refusal that knows when a retry would be served
    (a 429's limit, a 503 with no backend or a draining server: ``retry_after_s``) carries
    ``Retry-After`` in whole seconds, rounded up so that a retry then is admitted (RFC 9110
    §10.2.3), at least 1; a 429 also carries its ``x-ratelimit-*`` headers; a draining
    server's 503 closes the connection (the retry opens one elsewhere)."""
    assert isinstance(exc, LLMRouteError)
    status, body = to_openai(exc)
    headers = {"x-request-id": request_id(request)}
    if isinstance(exc, RateLimited):
        headers.update(exc.headers)
    if isinstance(exc, (RateLimited, NoBackendAvailable, ShuttingDown)) \
            and exc.retry_after_s is not None:
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after_s)))
    if isinstance(exc, ShuttingDown):
        headers["connection"] = "close"
    return json_response(body, status, headers)


async def on_http_error(request: Request, exc: Exception) -> Response:
    """Starlette's 404/405 (unknown path or method) in OpenAI shape."""
    assert isinstance(exc, HTTPException)
    kind, code = _HTTP_TYPES.get(exc.status_code, ("invalid_request_error", "http_error"))
    message = f"{request.method} {request.url.path}: {exc.detail}"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    headers = {**(exc.headers or {}), "x-request-id": request_id(request)}
    return json_response(body, exc.status_code, headers)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    """A bug: logged with its traceback, answered as an OpenAI-shaped 500."""
    log.exception("unhandled_error", path=request.url.path)
    body = {"error": {"message": "internal error", "type": "server_error", "param": None,
                      "code": "internal_error"}}
    return json_response(body, 500, {"x-request-id": request_id(request)})
