"""The floor: a bare OpenAI passthrough proxy on llmroute's HTTP stack (Starlette + uvicorn +
one pooled aiohttp client), with no validation and no routing.

``python bench/lib/passthrough.py PORT UPSTREAM_URL``
"""

from __future__ import annotations

import contextlib
import sys

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


def make_app(upstream: str) -> Starlette:
    """Forward POST /v1/chat/completions to ``upstream`` byte for byte."""
    state: dict[str, aiohttp.ClientSession] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            state["session"] = session
            yield

    async def chat(request: Request) -> Response:
        body = await request.body()
        resp = await state["session"].post(upstream + "/v1/chat/completions", data=body,
                                           headers={"content-type": "application/json"})
        if resp.content_type == "text/event-stream":
            async def relay():
                try:
                    async for chunk in resp.content.iter_any():
                        yield chunk
                finally:
                    resp.close()
            return StreamingResponse(relay(), media_type="text/event-stream")
        data = await resp.read()
        return Response(data, resp.status, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])],
                     lifespan=lifespan)


if __name__ == "__main__":
    # uvicorn as llmroute runs it (``api.server.uvicorn_config``): no access log, no
    # X-Forwarded-* middleware
    uvicorn.run(make_app(sys.argv[2]), host="127.0.0.1", port=int(sys.argv[1]),
                log_level="warning", access_log=False, proxy_headers=False)
