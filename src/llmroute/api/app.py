"""The ASGI app: OpenAI-compatible routes over a Runtime.

``create_app(config)`` builds everything in its lifespan (engines, HTTP client);
``create_app(config, runtime=rt)`` serves an already-open Runtime (tests, embedding).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from llmroute import pipeline
from llmroute.api.body import read_json
from llmroute.api.debug_backends import debug_backends
from llmroute.api.debug_fuse import debug_fuse
from llmroute.api.debug_route import debug_route
from llmroute.api.errors import on_http_error, on_llmroute_error, on_unexpected, request_id
from llmroute.api.metrics import metrics
from llmroute.api.responses import json_response
from llmroute.api.wire import parse_chat, parse_completion
from llmroute.config import Config
from llmroute.errors import LLMRouteError
from llmroute.runtime import Progress, Runtime, open_runtime
from llmroute.types import ChatRequest

Parser = Callable[[Any, str], ChatRequest]
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def create_app(config: Config, *, runtime: Runtime | None = None,
               progress: Progress | None = None) -> Starlette:
    """The Starlette app; its lifespan opens a Runtime unless one is given."""
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if runtime is not None:
            app.state.runtime = runtime
            yield
            return
        async with open_runtime(config, progress) as rt:
            app.state.runtime = rt
            yield

    app = Starlette(routes=_routes(), lifespan=lifespan, exception_handlers={
        LLMRouteError: on_llmroute_error, HTTPException: on_http_error,
        Exception: on_unexpected})
    if runtime is not None:
        app.state.runtime = runtime
    return app


def _routes() -> list[Route]:
    return [
        Route("/v1/chat/completions", _endpoint(parse_chat), methods=["POST"]),
        Route("/v1/completions", _endpoint(parse_completion), methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/debug/backends", debug_backends, methods=["GET"]),
        Route("/debug/route", debug_route, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/debug/fuse", debug_fuse, methods=["GET"]),
    ]


def _endpoint(parse: Parser) -> Callable[[Request], Coroutine[Any, Any, Response]]:
    async def endpoint(request: Request) -> Response:
        rt: Runtime = request.app.state.runtime
        body = await read_json(request, rt.config.server.max_body_bytes)
        chat = parse(body, request_id(request))
        routed = await _unless_disconnected(request, pipeline.route(rt, chat))
        if routed is None:
            return Response(status_code=499)
        if routed.stream is not None:
            return StreamingResponse(routed.stream, headers={**routed.headers, **_SSE_HEADERS},
                                     media_type="text/event-stream")
        return json_response(routed.body, 200, routed.headers)
    return endpoint


async def _unless_disconnected(request: Request, work: Coroutine[Any, Any, Any]) -> Any:
    """Run ``work`` (routing, up to the first streamed chunk); if the client disconnects
    first, cancel it (which closes the upstream request) and return None."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def models(request: Request) -> Response:
    """``GET /v1/models``: ``auto``, every pool, and every served model name."""
    rt: Runtime = request.app.state.runtime
    names = ["auto", *dict.fromkeys(b.pool for b in rt.backends.values()),
             *dict.fromkeys(b.model for b in rt.backends.values())]
    created = int(time.time())
    data = [{"id": n, "object": "model", "created": created, "owned_by": "llmroute"}
            for n in dict.fromkeys(names)]
    return json_response({"object": "list", "data": data})


async def health(request: Request) -> Response:
    """``GET /health``: the router process is alive."""
    return json_response({"status": "ok"})


async def ready(request: Request) -> Response:
    """``GET /ready``: 200 when at least one backend's breaker allows traffic, else 503."""
    rt: Runtime = request.app.state.runtime
    now = rt.clock()
    usable = [b for b in rt.backends if rt.breaker.allow(b, now)]
    body = {"status": "ready" if usable else "unavailable", "usable_backends": usable}
    return json_response(body, 200 if usable else 503)
