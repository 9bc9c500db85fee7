"""Running the ASGI app with uvicorn: in the foreground (``serve_app``; ``llmroute serve``
goes through ``assemble.serve.serve_forever``) or in the background on a free loopback port
(``demo``, tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import uvicorn


async def serve_app(app: Any, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` on ``host:port`` until SIGINT/SIGTERM (its lifespan is not run)."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                           access_log=False, lifespan="off"))
    await server.serve()


@contextlib.asynccontextmanager
async def serve_in_background(app: Any, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``app`` on a free port of ``host`` while the block runs; yields the base URL.
    Raises RuntimeError if the server cannot start."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="warning",
                                           access_log=False, lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            raise RuntimeError(f"uvicorn did not start: {task.exception()!r}")
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
