"""``llmroute`` command line: ``serve``, ``demo``, ``emulate``, ``backends``, ``classify``,
``gate``, ``strategy``, ``keys``, ``tenants``, ``handoffs``, ``trace``, ``audit``, ``reload``
and ``bench``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from llmroute.errors import ConfigError, LLMRouteError

if TYPE_CHECKING:
    from llmroute.config import Config

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
"""``--log-level`` values: the levels both the logging setup and uvicorn know."""


def _parser() -> argparse.ArgumentParser:
    """The whole command line. Building it imports argparse and the command modules, whose
    top levels stay light (constants only); each command imports what it runs in its
    handler, so ``llmroute X --help`` and a refused ``serve`` cost little."""
    p = argparse.ArgumentParser(prog="llmroute", description=__doc__.replace("``", ""))
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the OpenAI-compatible router")
    serve.add_argument("--config", type=Path, help="YAML config (default: embedded, local "
                       "llama.cpp engines)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--log-level", default="info", help=f"one of {', '.join(LOG_LEVELS)}")
    serve.add_argument("--workers", type=int, default=1, help="router processes sharing the "
                       "port (SO_REUSEPORT); more than 1 needs state: {kind: redis} and no "
                       "launch backends (docs/deploy.md)")
    serve.add_argument("--ssl-certfile", "--tls-cert", dest="ssl_certfile", help="serve HTTPS "
                       "with this PEM certificate chain (with --ssl-keyfile; server.tls)")
    serve.add_argument("--ssl-keyfile", "--tls-key", dest="ssl_keyfile",
                       help="the certificate's unencrypted PEM private key")
    serve.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    demo = sub.add_parser("demo", help="start engines + router and route real prompts")
    demo.add_argument("--config", type=Path)
    demo.add_argument("--prompts", type=Path, help="JSONL: request bodies, {prompt} or {turns}")
    demo.add_argument("--max-tokens", type=int, default=128)
    demo.add_argument("--concurrency", type=int, default=3)
    _emulate_parser(sub)
    backends = sub.add_parser("backends", help="live table of a running router's backends")
    backends.add_argument("--url", default="http://127.0.0.1:8000", help="the router")
    backends.add_argument("--interval", type=float, default=1.0, help="refresh (seconds)")
    backends.add_argument("--once", action="store_true", help="print one table and exit")
    bench = sub.add_parser("bench", help="run a benchmark of the source checkout, e.g. "
                           "`llmroute bench overhead --quick`")
    bench.add_argument("name", help="overhead, decide, schedule, handoff, gate_quality, …")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="passed to bench/NAME.py")
    from llmroute.cli.gate import add_commands
    from llmroute.cli.handoffs import add_commands as add_handoff_commands
    from llmroute.cli.keys import add_commands as add_key_commands
    from llmroute.cli.observe import add_commands as add_observe_commands
    from llmroute.cli.reload import add_commands as add_reload_commands
    from llmroute.cli.strategy import add_commands as add_strategy_commands

    add_commands(sub)
    add_strategy_commands(sub)
    add_key_commands(sub)
    add_handoff_commands(sub)
    add_observe_commands(sub)
    add_reload_commands(sub)
    return p


def _emulate_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from llmroute.emulator.hardware import gpu_profiles, model_sizes

    emu = sub.add_parser("emulate", help="serve emulated GPU engines (OpenAI API + vLLM "
                         "/metrics) driven by a performance model")
    emu.add_argument("--profile", default="a100-80g", choices=sorted(gpu_profiles()))
    emu.add_argument("--model-size", default="7b", choices=sorted(model_sizes()))
    emu.add_argument("--gpus", type=int, default=1, help="tensor-parallel GPUs per engine")
    emu.add_argument("--port", type=int, default=8100, help="first port (engine i: port+i)")
    emu.add_argument("--count", type=int, default=1, help="engines to serve")
    emu.add_argument("--host", default="127.0.0.1")
    emu.add_argument("--time-scale", type=float, default=1.0,
                     help="wall seconds per model second (0.1 = ten times faster)")
    emu.add_argument("--max-waiting", type=int, help="waiting-queue limit (503 beyond it)")
    emu.add_argument("--stream-interval", type=int, default=1, help="tokens per SSE chunk")
    cue = emu.add_argument_group("misbehaviour on cue (model seconds since start)")
    cue.add_argument("--degrade-at", type=float, help="answers turn flat and some are cut short")
    cue.add_argument("--hot-at", type=float, help="the GPU's cooling fails: it runs 25 °C hotter")
    cue.add_argument("--slow-link-at", type=float, help="the link turns 5 times slower")
    cue.add_argument("--link-rtt-ms", type=float, default=0.0,
                     help="the link's round trip (model ms; 0: none)")
    cue.add_argument("--link-mbps", type=float, help="the link's bandwidth (MB per model s)")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "emulate":
            return _emulate(args)
        if args.command == "bench":
            from llmroute.cli.bench import run as run_bench

            return run_bench(args.name, args.args)
        if args.command == "strategy":
            from llmroute.cli.strategy import run as run_strategy

            return run_strategy(args)
        if hasattr(args, "observe_run"):  # trace, audit
            return args.observe_run(args)
        if hasattr(args, "reload_run"):
            return args.reload_run(args)
        if args.command == "backends":
            from llmroute.cli.anchor import watch

            return watch(args.url, args.interval, args.once)
        if args.command == "serve":
            args.log_level = log_level(args.log_level)
        from llmroute.config import load_config

        config = load_config(args.config)
        if hasattr(args, "policy_run"):  # keys, tenants, handoffs
            return args.policy_run(config, args)
        if args.command in ("classify", "gate"):
            from llmroute.cli.gate import run

            return run(config, args)
        if args.command == "serve":
            return _serve(config, args)
        return _demo(config, args)
    except LLMRouteError as exc:
        print(f"llmroute: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def log_level(value: str) -> str:
    """``value`` as one of ``LOG_LEVELS`` (any case); raises ConfigError naming them."""
    level = value.lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"--log-level: unknown level {value!r}; use one of "
                          f"{', '.join(LOG_LEVELS)}")
    return level


def _serve(config: Config, args: argparse.Namespace) -> int:
    from llmroute.api.tls import check_tls

    config = with_tls(config, args.ssl_certfile, args.ssl_keyfile)
    if config.server.tls is not None:
        check_tls(config.server.tls)  # one line, exit 2, before anything starts
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    if args.workers == 1 and not args.reuse_port:
        check_port(host, port)
    _check_strategy_dir(config)
    from llmroute.observe.logging import configure_logging

    configure_logging(args.log_level, json=config.observe.log_format == "json")
    if args.workers != 1:
        return _serve_workers(config, args, host, port)
    return _serve_one(config, args, host, port)


def check_port(host: str, port: int) -> None:
    """Bind ``host:port`` once and let it go, before the router's modules (gate, strategies,
    exporters) are imported, so a port in use is a one-line exit 2 within a second
    (``serve_forever`` binds it again and raises the same ConfigError should it be taken
    in between). Raises ConfigError when it cannot be bound (``api.server.bind_socket``)."""
    from llmroute.api.server import bind_socket

    bind_socket(host, port).close()


def _check_strategy_dir(config: Config) -> None:
    """Raise ConfigError when ``config`` names a strategies folder that cannot be read: a
    one-line exit before any engine starts."""
    if config.strategies is None:
        return
    from llmroute.assemble.strategies import strategy_dir
    from llmroute.strategy.loader import strategy_files

    if (directory := strategy_dir(config)) is not None:
        strategy_files(directory)


def _serve_one(config: Config, args: argparse.Namespace, host: str, port: int) -> int:
    import structlog
    import uvloop  # libuv event loop: cheaper per request than asyncio's default loop

    from llmroute.assemble.serve import serve_forever

    log = structlog.get_logger("llmroute")

    def progress(fraction: float, message: str) -> None:
        log.info("startup", progress=f"{fraction:.0%}", step=message)

    uvloop.run(serve_forever(config, host, port, progress, args.log_level,
                             reuse_port=args.reuse_port))
    return 0


def with_tls(config: Config, certfile: str | None, keyfile: str | None) -> Config:
    """``config`` whose ``server.tls`` takes the command line's certificate and key files
    (each overrides the config's). Raises ConfigError when one of the two is then missing."""
    if certfile is None and keyfile is None:
        return config
    from llmroute.config.server import TlsConfig

    old = config.server.tls
    cert, key = certfile or (old and old.cert), keyfile or (old and old.key)
    if not cert or not key:
        raise ConfigError("--ssl-certfile and --ssl-keyfile go together (or set server.tls "
                          "in the config)")
    tls = old.model_copy(update={"cert": cert, "key": key}) if old else TlsConfig(
        cert=cert, key=key)
    return config.model_copy(update={"server": config.server.model_copy(update={"tls": tls})})


def _serve_workers(config: Config, args: argparse.Namespace, host: str, port: int) -> int:
    import asyncio

    from llmroute.assemble.workers import check_workers, claim_port, supervise, worker_argv

    check_workers(config, args.workers)
    argv = worker_argv(args.config, host, claim_port(host, port), args.log_level,
                       config.server.tls)
    return asyncio.run(supervise(argv, args.workers))


def _demo(config: Config, args: argparse.Namespace) -> int:
    import asyncio

    from llmroute.demo.main import run_demo
    from llmroute.observe.logging import configure_logging

    configure_logging("error")
    return asyncio.run(run_demo(config, args.prompts, max_tokens=args.max_tokens,
                                concurrency=args.concurrency))


def _emulate(args: argparse.Namespace) -> int:
    import asyncio

    from llmroute.emulator.cues import Cues, Link
    from llmroute.emulator.fleet import serve_until_cancelled
    from llmroute.emulator.spec import EngineSpec

    link = Link(args.link_rtt_ms / 1000.0, args.link_mbps * 1e6 if args.link_mbps else None)
    cues = Cues(degrade_at_s=args.degrade_at, hot_at_s=args.hot_at,
                slow_link_at_s=args.slow_link_at, link=link)
    try:
        spec = EngineSpec(args.profile, args.model_size, args.gpus, args.time_scale,
                          max_waiting=args.max_waiting, stream_interval=args.stream_interval,
                          cues=cues)
        spec.scheduler_config()
    except ValueError as exc:
        print(f"llmroute emulate: {exc}", file=sys.stderr)
        return 2
    ports = [args.port + i for i in range(args.count)]
    asyncio.run(serve_until_cancelled([spec] * args.count, args.host, ports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
