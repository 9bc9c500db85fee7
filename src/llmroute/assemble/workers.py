"""``llmroute serve --workers N``: N router processes on one machine sharing one port.

Each worker is a whole ``llmroute serve`` of the same config in a process of its own (its
own Runtime, event loop and core), listening on the same ``host:port`` with
``SO_REUSEPORT``, so the kernel spreads new connections over them. Workers share state
only through the Redis that ``state: {kind: redis, url: …}`` names, so a config without it
is refused (one line, exit 2): N workers on in-process state would each enforce every limit
on their own, admitting N times what it says. Backends that llmroute starts itself
(``launch``) are refused too: every worker would start its own copy of each engine on the
same GPU and ports. Start such engines once (``llmroute serve`` of a config with only those
backends, or the engine's own server) and name them by ``base_url``.

The parent starts the workers in a process group of their own and forwards SIGTERM, SIGINT
and SIGHUP to each (so each drains as ``api/drain.py`` says); once all have exited it exits
0 when they did. A worker that exits on its own stops the others and the parent exits
with its status (1 when it was 0): run the parent under a supervisor (systemd,
Kubernetes) that restarts it. A worker also gets SIGTERM when the parent dies (Linux).
"""

from __future__ import annotations

import asyncio
import ctypes
import signal
import sys
from pathlib import Path

import structlog

from llmroute.api.server import bind_socket
from llmroute.config import Config
from llmroute.config.server import TlsConfig
from llmroute.errors import ConfigError

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals the parent passes on to every worker."""

_PR_SET_PDEATHSIG = 1


def check_workers(config: Config, workers: int) -> None:
    """Raise ConfigError (one line) when ``config`` cannot run as ``workers`` processes:
    fewer than 1, no Redis state store, or backends llmroute launches itself."""
    if workers < 1:
        raise ConfigError(f"--workers: {workers} is not a number of processes (1 or more)")
    if workers == 1:
        return
    if config.state.kind != "redis":
        raise ConfigError(f"--workers {workers} needs a shared state store: set state: "
                          "{kind: redis, url: redis://host:port/0} in the config (each "
                          "worker would otherwise enforce every limit alone)")
    launched = [b.id for b in config.backends if b.launch is not None]
    if launched:
        raise ConfigError(f"--workers {workers}: backend(s) {', '.join(launched)} use launch; "
                          "every worker would start its own engine. Start them once and "
                          "name them by base_url")


def claim_port(host: str, port: int) -> int:
    """The port the workers will share (``port``, or a free one for 0), checked bindable
    with ``SO_REUSEPORT`` and released again (a bound socket that does not listen would
    take its share of connections). Raises ConfigError when it cannot be bound."""
    with bind_socket(host, port, reuse_port=True) as sock:
        return int(sock.getsockname()[1])


def worker_argv(config_path: Path | None, host: str, port: int, log_level: str,
                tls: TlsConfig | None = None) -> list[str]:
    """The command line of one worker: this Python running ``llmroute serve`` with
    ``--reuse-port`` on ``host:port`` (HTTPS with ``tls``'s certificate and key; its other
    settings come from the config file)."""
    argv = [sys.executable, "-m", "llmroute.cli.main", "serve", "--reuse-port",
            "--host", host, "--port", str(port), "--log-level", log_level]
    if tls is not None:
        argv += ["--ssl-certfile", tls.cert, "--ssl-keyfile", tls.key]
    return argv + (["--config", str(config_path)] if config_path is not None else [])


async def supervise(argv: list[str], workers: int) -> int:
    """Run ``workers`` processes of ``argv`` until they have all exited (module docstring);
    returns the exit status for the parent: 0 when every worker exited 0 after a forwarded
    signal, else the status of the first worker that exited on its own (1 for 0)."""
    log = structlog.get_logger("llmroute")
    procs = [await asyncio.create_subprocess_exec(*argv, start_new_session=True,
                                                  preexec_fn=_die_with_parent)
             for _ in range(workers)]
    log.info("workers_started", workers=workers, pids=[p.pid for p in procs])
    loop = asyncio.get_running_loop()
    stopping: list[int] = []  # the signal forwarded first, once one was
    for sig in FORWARDED:
        loop.add_signal_handler(sig, _forward, procs, sig, stopping)
    try:
        return await _wait_all(procs, stopping, log)
    finally:
        for sig in FORWARDED:
            loop.remove_signal_handler(sig)


async def _wait_all(procs: list[asyncio.subprocess.Process], stopping: list[int],
                    log: structlog.typing.FilteringBoundLogger) -> int:
    status = 0
    pending = {asyncio.ensure_future(p.wait()) for p in procs}
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if not stopping:  # a worker exited on its own: stop the rest
            code = next(iter(done)).result()
            status = code or 1
            log.error("worker_exited", status=code, stopping=len(pending))
            _forward(procs, signal.SIGTERM, stopping)
    if status == 0 and any(p.returncode != 0 for p in procs):
        status = 1
    return status


def _forward(procs: list[asyncio.subprocess.Process], sig: int, stopping: list[int]) -> None:
    stopping.append(sig)
    for p in procs:
        if p.returncode is None:
            p.send_signal(sig)


def _die_with_parent() -> None:
    """In the forked worker: ask Linux to send it SIGTERM when the parent dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    except (OSError, AttributeError):  # not Linux: the worker outlives a killed parent
        return
