"""The served router: the app over a Runtime this package opens."""

from __future__ import annotations

from starlette.applications import Starlette

from llmroute.api.app import create_app
from llmroute.api.server import bind_socket, serve_app
from llmroute.assemble.runtime import Progress, open_runtime
from llmroute.config import Config


def build_app(config: Config, progress: Progress | None = None) -> Starlette:
    """The app whose lifespan opens ``config``'s Runtime (engines, HTTP client, collector)
    and closes it on shutdown."""
    return create_app(config, opener=lambda: open_runtime(config, progress))


async def serve_forever(config: Config, host: str, port: int, progress: Progress | None,
                        log_level: str = "info") -> None:
    """Claim ``host:port``, start engines and the gate, then serve until SIGINT/SIGTERM;
    engines stop after the server. Raises ConfigError at once when the port cannot be
    bound (before any engine starts), EngineError when a local engine cannot be built or
    started."""
    with bind_socket(host, port) as sock:
        async with open_runtime(config, progress) as rt:
            await serve_app(create_app(config, runtime=rt), host, port, log_level, sock)
