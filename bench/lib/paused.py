"""A control path for the gate-on figure: llmroute with the gate off, but every request
first waits on the event loop — no work, only time — for as long as the client asks.

``python bench/lib/paused.py PORT CONFIG``: serves llmroute for ``CONFIG`` like ``llmroute
serve`` (uvicorn on uvloop); a POST whose ``x-bench-pause-ms`` header holds a number waits
that many ms (``asyncio.sleep``) before llmroute reads it. ``bench/overhead.py`` sends the
gate's p50 from the gate-on run just before, so the two paths spend the same time before
routing and differ only in whether that time is classification work.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvicorn
import uvloop
from starlette.types import ASGIApp, Receive, Scope, Send

from llmroute.api.app import create_app
from llmroute.api.server import uvicorn_config
from llmroute.config import load_config
from llmroute.assemble.runtime import open_runtime

HEADER = b"x-bench-pause-ms"


class Paused:
    """ASGI wrapper around ``app``: a POST carrying ``HEADER`` waits that many ms first."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            pause = next((v for k, v in scope["headers"] if k == HEADER), None)
            if pause is not None:
                await asyncio.sleep(float(pause) / 1000)
        await self._app(scope, receive, send)


async def serve(port: int, config_path: Path) -> None:
    """Serve llmroute behind ``Paused`` on 127.0.0.1:``port`` until interrupted."""
    config = load_config(config_path)
    async with open_runtime(config) as rt:
        app = Paused(create_app(config, runtime=rt))
        server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, "warning", None))
        await server.serve()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), Path(sys.argv[2])))
