"""The ASGI app: OpenAI-compatible routes over a Runtime.

``create_app(config, runtime=rt)`` serves an already-open Runtime (``llmroute serve``,
tests, embedding); ``create_app(config, opener=...)`` opens one in its lifespan
(``assemble.serve.build_app``: engines, HTTP client). This module builds no Runtime itself.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from llmroute.flow import pipeline
from llmroute.api.admin_cache import purge_cache
from llmroute.api.admin import (
    create_key,
    list_keys,
    operator,
    reload_config,
    revoke_key,
    rotate,
)
from llmroute.api.dashboard import dashboard
from llmroute.api.debug_backends import debug_backends
from llmroute.api.debug_fuse import debug_fuse
from llmroute.api.debug_requests import debug_requests
from llmroute.api.debug_route import debug_route
from llmroute.api.debug_strategies import debug_strategies
from llmroute.api.errors import on_http_error, on_llmroute_error, on_unexpected
from llmroute.api.exchange import Exchange
from llmroute.api.gateway import Gateway
from llmroute.api.handoffs import (
    answer_handoff,
    claim_handoff,
    fetch_handoff,
    list_handoffs,
    show_handoff,
)
from llmroute.api.messages import Messages, count_tokens
from llmroute.api.metrics import metrics
from llmroute.api.openai_responses import Responses, delete_response, get_response
from llmroute.api.openapi import build_openapi, openapi_endpoint
from llmroute.api.ready import ready
from llmroute.api.responses import json_response
from llmroute.api.trace import get_trace
from llmroute.api.wire import parse_chat, parse_completion, parse_embeddings
from llmroute.config import Config
from llmroute.config.server import CorsConfig
from llmroute.flow.embeddings import route_embeddings
from llmroute.errors import LLMRouteError
from llmroute.runtime import Runtime

Opener = Callable[[], AbstractAsyncContextManager[Runtime]]
"""Opens a Runtime for the app's lifespan (``assemble.runtime.open_runtime``)."""


def create_app(config: Config, *, runtime: Runtime | None = None,
               opener: Opener | None = None) -> Gateway:
    """The Starlette app for ``config`` over ``runtime``, else over the Runtime ``opener()``
    opens for the app's lifespan. Raises TypeError when neither is given."""
    if runtime is None and opener is None:
        raise TypeError("create_app needs a runtime or an opener")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if runtime is not None or opener is None:
            app.state.runtime = runtime
            yield
            return
        async with opener() as rt:
            app.state.runtime = rt
            yield

    exchanges = {"/v1/chat/completions": Exchange(parse_chat),
                 "/v1/completions": Exchange(parse_completion, api="completions"),
                 "/v1/embeddings": Exchange(parse_embeddings, route_embeddings,
                                            api="embeddings"),
                 "/v1/messages": Exchange(None, surface=Messages()),
                 "/v1/responses": Exchange(None, surface=Responses())}
    cors = _cors(config.server.cors)
    hot: dict[str, ASGIApp] = {path: ex if cors is None else CORSMiddleware(ex, **cors)
                               for path, ex in exchanges.items()}
    app = Gateway(hot, exchanges, routes=_routes(exchanges), lifespan=lifespan,
                  exception_handlers={
        LLMRouteError: on_llmroute_error, HTTPException: on_http_error,
        Exception: on_unexpected},
        middleware=[] if cors is None else [Middleware(CORSMiddleware, **cors)])
    if runtime is not None:
        app.state.runtime = runtime
    return app


def _cors(c: CorsConfig) -> dict[str, Any] | None:
    """``CORSMiddleware``'s arguments for ``c``; None when CORS is off (no origin allowed):
    then nothing is added to any path."""
    if not c.allow_origins:
        return None
    return {"allow_origins": c.allow_origins, "allow_methods": c.allow_methods,
            "allow_headers": c.allow_headers, "allow_credentials": c.allow_credentials,
            "expose_headers": c.expose_headers, "max_age": c.max_age_s}


def _routes(hot: dict[str, Exchange]) -> list[Route]:
    return [
        *(Route(path, exchange, methods=["POST"]) for path, exchange in hot.items()),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/openapi.json", openapi_endpoint(build_openapi()), methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/debug/backends", operator(debug_backends), methods=["GET"]),
        Route("/debug/route", operator(debug_route), methods=["GET"]),
        Route("/debug/strategies", operator(debug_strategies), methods=["GET"]),
        Route("/metrics", operator(metrics, metrics=True), methods=["GET"]),
        Route("/debug/fuse", operator(debug_fuse), methods=["GET"]),
        Route("/debug/requests", operator(debug_requests), methods=["GET"]),
        Route("/dashboard", dashboard, methods=["GET"]),
        Route("/trace/{request_id:path}", operator(get_trace), methods=["GET"]),
        Route("/admin/keys", operator(list_keys), methods=["GET"]),
        Route("/admin/keys", operator(create_key), methods=["POST"]),
        Route("/admin/keys/{key_id}", operator(revoke_key), methods=["DELETE"]),
        Route("/admin/keys/{key_id}/rotate", operator(rotate), methods=["POST"]),
        Route("/admin/reload", operator(reload_config), methods=["POST"]),
        Route("/admin/cache/purge", operator(purge_cache), methods=["POST"]),
        Route("/admin/handoffs", operator(list_handoffs), methods=["GET"]),
        Route("/admin/handoffs/{ticket}", operator(show_handoff), methods=["GET"]),
        Route("/admin/handoffs/{ticket}/claim", operator(claim_handoff), methods=["POST"]),
        Route("/admin/handoffs/{ticket}/answer", operator(answer_handoff), methods=["POST"]),
        Route("/v1/handoffs/{ticket}", fetch_handoff, methods=["GET"]),
    ]


async def models(request: Request) -> Response:
    """``GET /v1/models``: ``auto``, every pool, and every served model name. With auth on
    it needs a usable key, as the OpenAI endpoints do. Raises AuthenticationFailed (401)."""
    rt: Runtime = request.app.state.runtime
    await pipeline.authenticate(rt, request.headers)
    names = ["auto", *dict.fromkeys(b.pool for b in rt.backends.values()),
             *dict.fromkeys(b.model for b in rt.backends.values())]
    created = int(time.time())
    data = [{"id": n, "object": "model", "created": created, "owned_by": "llmroute"}
            for n in dict.fromkeys(names)]
    return json_response({"object": "list", "data": data})


async def health(request: Request) -> Response:
    """``GET /health``: the router process is alive."""
    return json_response({"status": "ok"})
