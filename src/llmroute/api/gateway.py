"""``Gateway``, the app class: Starlette with the OpenAI endpoints' fast door, the drain
and the reloader as typed fields (``gateway(request)`` reads them from a handler).

``POST`` to the OpenAI endpoints goes straight to their ``Exchange`` (no routing or
middleware layers: the request path's CPU matters most, see ``bench/overhead.py``; with
CORS on, its middleware wraps them). Every other path, and these under a ``root_path``, go
through Starlette's routing and middleware as usual.
"""

from __future__ import annotations

from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from llmroute.api.drain import DRAIN_RETRY_AFTER_S, Drain
from llmroute.api.exchange import Exchange
from llmroute.errors import ShuttingDown


class Reloaded(Protocol):
    """A reload's outcome (``assemble/reload.Outcome``)."""

    def as_json(self) -> dict[str, Any]:
        """The answer of ``POST /admin/reload``."""
        ...


class Reloading(Protocol):
    """What ``POST /admin/reload`` calls (``assemble/reload.Reloader``, set by ``llmroute
    serve``)."""

    async def reload(self) -> Reloaded:
        """Apply the config file's pools, backends and routing; raises ConfigError (the
        old backends keep serving) with the reason."""
        ...


class Gateway(Starlette):
    """Starlette, except that ``POST`` to the paths in ``hot`` goes straight to their ASGI
    app (module docstring; ``exchanges``: the ``Exchange`` behind each). ``drain``: while
    it is active, they answer 503 ``server_shutting_down`` (``api/drain.py``), in each
    exchange's own shape. ``reloader``: what ``POST /admin/reload`` runs; None (404) when
    the app was not started by ``llmroute serve``."""

    def __init__(self, hot: dict[str, ASGIApp], exchanges: dict[str, Exchange],
                 **kwargs: Any):
        super().__init__(**kwargs)
        self._hot, self._exchanges = hot, exchanges
        self.drain = Drain()
        self.reloader: Reloading | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = self._hot.get(scope["path"]) if scope["type"] == "http" \
            and scope["method"] == "POST" else None
        if hot is None:
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        if self.drain.since is not None:
            exc = ShuttingDown("the server is shutting down; retry the request",
                               retry_after_s=DRAIN_RETRY_AFTER_S)
            await self._exchanges[scope["path"]].refuse(scope, receive, send, exc)
            return
        await hot(scope, receive, send)


def gateway(request: Request) -> Gateway:
    """The Gateway serving ``request``. Raises TypeError when the app is another (a bug:
    ``create_app`` builds every app)."""
    app = request.app
    if not isinstance(app, Gateway):
        raise TypeError(f"llmroute's handlers run in a Gateway, not {type(app).__name__}")
    return app
