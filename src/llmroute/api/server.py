"""Running the ASGI app with uvicorn: in the foreground (``serve_app``; ``llmroute serve``
goes through ``assemble.serve.serve_forever``, which claims the port with ``bind_socket``
before anything slow starts) or in the background on a free loopback port (``demo``,
tests)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import signal
import socket
import time
from collections.abc import AsyncIterator
from types import FrameType
from typing import Any

import structlog
import uvicorn

from llmroute.api import http11
from llmroute.api.drain import Drain
from llmroute.api.tls import uvicorn_tls
from llmroute.config.server import ServerConfig, TlsConfig
from llmroute.errors import ConfigError

log = structlog.get_logger("llmroute.server")


async def serve_app(app: Any, host: str, port: int, log_level: str = "info",
                    sock: socket.socket | None = None, *, drain_delay_s: float = 0.0,
                    drain_timeout_s: float | None = None, tls: TlsConfig | None = None,
                    limits: ServerConfig | None = None) -> None:
    """Serve ``app`` on ``host:port`` (HTTPS with ``tls``, checked beforehand by
    ``api.tls.check_tls``; with the header and body bounds of ``limits``, None: the
    defaults) until SIGINT/SIGTERM (its lifespan is not run); on
    ``sock`` when given (``bind_socket``'s, bound to that address), which uvicorn then
    listens on. SIGTERM drains first (``api/drain.py``: ``drain_delay_s`` seconds refusing
    new requests with 503 while still listening, then up to ``drain_timeout_s`` seconds —
    None: no bound — for accepted ones) and returns normally (the caller then stops the
    engines; the process exits 0)."""
    config = uvicorn_config(app, host, port, log_level, tls, limits,
                            timeout_graceful_shutdown=drain_timeout_s)
    server = _Server(config, app.drain, drain_delay_s)
    await server.serve(sockets=[sock] if sock is not None else None)


def uvicorn_config(app: Any, host: str, port: int, log_level: str, tls: TlsConfig | None,
                   limits: ServerConfig | None = None, **extra: Any) -> uvicorn.Config:
    """uvicorn's settings for every server of llmroute's: no access log (llmroute writes
    its own request line), no lifespan (the caller opens the runtime), TLS from ``tls``,
    and ``X-Forwarded-For``/``-Proto`` not read: llmroute uses neither the client's
    address nor the scheme, so uvicorn's ``ProxyHeadersMiddleware`` (on by default, for
    peers on 127.0.0.1) would only let a local client pass itself off as another, for
    ~0.9 µs a request (its call around a no-op app: 1.07 µs against 0.17). The protocol is
    ``api/http11.HttpProtocol``: OpenAI-shaped refusals of unparseable (400), oversized
    (431) and slow (408) requests, past ``limits``' bounds (None: the defaults).
    ``extra``: more ``uvicorn.Config`` arguments."""
    # uvicorn builds each connection's protocol by calling this with its own arguments
    http: Any = functools.partial(http11.HttpProtocol, limits=limits or ServerConfig())
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                          lifespan="off", proxy_headers=False, http=http,
                          **uvicorn_tls(tls), **extra)


class _Server(uvicorn.Server):
    """uvicorn's server, which also logs ``Uvicorn running on …`` when it is handed its
    socket (uvicorn leaves that to its multi-worker supervisor; the README and scripts wait
    for that line), and drains on SIGTERM: ``drain`` begins, and only ``delay_s`` later does
    uvicorn's own graceful shutdown start. Unlike uvicorn it does not re-raise the signal
    once shut down, so whoever called ``serve`` gets to clean up."""

    def __init__(self, config: uvicorn.Config, drain: Drain | None = None,
                 delay_s: float = 0.0):
        super().__init__(config)
        self.drain, self.delay_s = drain or Drain(), delay_s

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup, then the started message for handed-in ``sockets``."""
        await super().startup(sockets)
        if sockets is not None and self.started:
            self._log_started_message(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """The signal handler: a first SIGTERM begins the drain; another signal (or SIGTERM
        with no delay) starts the shutdown now; SIGINT during the shutdown forces it."""
        if self.should_exit:
            self.force_exit = self.force_exit or sig == signal.SIGINT
            return
        began = self.drain.begin()
        if began:
            log.warning("draining", signal=signal.Signals(sig).name, delay_s=self.delay_s,
                        in_flight=len(self.server_state.tasks))
        if not began or sig != signal.SIGTERM or self.delay_s <= 0:
            self.should_exit = True

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s); ends the drain's delay when it is over, and every
        ``SWEEP_TICKS`` ticks refuses the requests whose head or body is late
        (``api/http11.py``)."""
        if self.drain.active and self.drain.elapsed(time.monotonic()) >= self.delay_s:
            self.should_exit = True
        if counter % http11.SWEEP_TICKS == 0:
            http11.sweep(self.server_state.connections, asyncio.get_running_loop().time())
        return await super().on_tick(counter)


def bind_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``SO_REUSEADDR``, as uvicorn binds; with
    ``reuse_port`` also ``SO_REUSEPORT``, so several processes listen on one port and the
    kernel spreads connections over them: ``llmroute serve --workers``), not yet
    listening, so a client that connects before the server starts is refused rather than
    left waiting. Binding fails when a server already listens there or a socket holds the
    port without ``SO_REUSEADDR``; another ``SO_REUSEADDR`` socket may still bind it until
    uvicorn listens (Linux), and that rare race then fails in uvicorn. Raises ConfigError,
    one line, when the address cannot be resolved or bound (in use, or privileged)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (OSError, UnicodeError) as err:
        raise ConfigError(f"cannot listen on {host}:{port}: {_reason(err)}") from err
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
    except OSError as err:
        sock.close()
        hint = " (another process is using it: pick another with --port or server.port)" \
            if err.errno == errno.EADDRINUSE else ""
        raise ConfigError(f"cannot listen on {host}:{port}: {_reason(err)}{hint}") from err
    return sock


def _reason(err: BaseException) -> str:
    return (getattr(err, "strerror", None) or str(err)).lower()



@contextlib.asynccontextmanager
async def serve_in_background(app: Any, host: str = "127.0.0.1",
                              tls: TlsConfig | None = None,
                              limits: ServerConfig | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on a free port of ``host`` (HTTPS with ``tls``; ``limits`` as
    ``serve_app``'s) while the block runs; yields the base URL. Raises RuntimeError if the
    server cannot start."""
    server = _Server(uvicorn_config(app, host, 0, "warning", tls, limits))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            raise RuntimeError(f"uvicorn did not start: {task.exception()!r}")
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://{host}:{port}"
    finally:
        server.should_exit = True
        await task
