"""The served router: the app over a Runtime this package opens."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
from collections.abc import Iterator

from starlette.applications import Starlette

from llmroute.api.app import create_app
from llmroute.api.gateway import Gateway
from llmroute.api.server import bind_socket, serve_app
from llmroute.api.tls import check_tls
from llmroute.assemble.discovery import discovering
from llmroute.assemble.generations import Generations
from llmroute.assemble.reload import Reloader
from llmroute.assemble.runtime import Progress, open_runtime
from llmroute.config import Config
from llmroute.runtime import Runtime

GC_YOUNG_THRESHOLD = 10_000
"""Net allocations of GC-tracked objects between two collections of the youngest
generation while serving (CPython's default is 700). Measured with ``bench/overhead.py``'s
upstream, 16 clients, 8,000 JSON requests: at 700 the collector ran 333 young, 30 middle
and 3 full collections (each full one scanning the ~62,000 objects built at start-up),
7–8 % of the router's CPU; with this threshold and the start-up objects frozen, one
young collection, under 0.1 %. Requests free what they allocate by reference counting,
so the collector finds no garbage either way."""


def build_app(config: Config, progress: Progress | None = None) -> Starlette:
    """The app whose lifespan opens ``config``'s Runtime (engines, HTTP client, collector)
    and closes it on shutdown."""
    return create_app(config, opener=lambda: open_runtime(config, progress))


async def serve_forever(config: Config, host: str, port: int, progress: Progress | None,
                        log_level: str = "info", *, reuse_port: bool = False) -> None:
    """Claim ``host:port``, start engines and the gate, then serve until SIGINT/SIGTERM
    (SIGTERM drains first: ``api/drain.py``); engines stop after the server. ``SIGHUP`` and
    ``POST /admin/reload`` reload the backends (``assemble/reload.py``); ``discovery:``
    entries are refreshed through the same path (``assemble/discovery.py``); HTTPS when
    ``server.tls``. Raises ConfigError at once when the TLS files cannot serve
    (``api/tls.py``) or the port cannot be bound (before any engine starts), EngineError
    when a local engine cannot be built or started. With ``reuse_port`` (a worker of ``llmroute serve --workers``,
    ``assemble/workers.py``) the port is shared with ``SO_REUSEPORT`` and bound only once
    the Runtime is open: a bound socket that does not listen yet would be handed (and
    leave hanging) its share of the connections the other workers already take."""
    if config.server.tls is not None:
        check_tls(config.server.tls)
    gens = Generations()
    if reuse_port:
        async with open_runtime(config, progress, gens) as rt:
            with bind_socket(host, port, reuse_port=True) as sock:
                await _serve_runtime(config, rt, gens, (host, port, log_level), sock)
        return
    with bind_socket(host, port) as sock:
        async with open_runtime(config, progress, gens) as rt:
            await _serve_runtime(config, rt, gens, (host, port, log_level), sock)


async def _serve_runtime(config: Config, rt: Runtime, gens: Generations,
                         where: tuple[str, int, str], sock: socket.socket) -> None:
    app = create_app(config, runtime=rt)
    host, port, log_level = where
    with serving_gc(), reloading(app, gens) as reloader:
        async with discovering(reloader, config.discovery, rt.metrics.registry):
            await serve_app(app, host, port, log_level, sock,
                            drain_delay_s=config.server.drain_delay_s,
                            drain_timeout_s=config.server.drain_timeout_s,
                            tls=config.server.tls, limits=config.server)


@contextlib.contextmanager
def reloading(app: Gateway, gens: Generations) -> Iterator[Reloader]:
    """While the block runs: ``app`` reloads its backends on ``POST /admin/reload`` and on
    ``SIGHUP`` (``assemble/reload.py``; a refused reload is logged)."""
    reloader = app.reloader = Reloader(app, None, gens)
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def on_hup() -> None:
        task = loop.create_task(reloader.reload_logged())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hup)
    try:
        yield reloader
    finally:
        loop.remove_signal_handler(signal.SIGHUP)


@contextlib.contextmanager
def serving_gc() -> Iterator[None]:
    """While the block runs: everything built so far (modules, config, the Runtime) is
    frozen out of the cyclic garbage collector's scans (``gc.freeze``: it lives as long as
    the server), and the youngest generation is collected every ``GC_YOUNG_THRESHOLD``
    net allocations. Both are restored afterwards. Collection itself is unchanged: a
    reference cycle is still found and freed, only later."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
