"""``llmroute`` command line: ``serve`` and ``demo``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from llmroute.config import Config, load_config
from llmroute.errors import LLMRouteError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmroute", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the OpenAI-compatible router")
    serve.add_argument("--config", type=Path, help="YAML config (default: embedded, local "
                       "llama.cpp engines)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--log-level", default="info")
    demo = sub.add_parser("demo", help="start engines + router and route real prompts")
    demo.add_argument("--config", type=Path)
    demo.add_argument("--prompts", type=Path, help="JSONL: request bodies, {prompt} or {turns}")
    demo.add_argument("--max-tokens", type=int, default=128)
    demo.add_argument("--concurrency", type=int, default=3)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
        if args.command == "serve":
            return _serve(config, args)
        return _demo(config, args)
    except LLMRouteError as exc:
        print(f"llmroute: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _serve(config: Config, args: argparse.Namespace) -> int:
    import structlog

    from llmroute.observe.logging import configure_logging
    from llmroute.server import serve_forever

    configure_logging(args.log_level)
    log = structlog.get_logger("llmroute")
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port

    def progress(fraction: float, message: str) -> None:
        log.info("startup", progress=f"{fraction:.0%}", step=message)

    asyncio.run(serve_forever(config, host, port, progress, args.log_level))
    return 0


def _demo(config: Config, args: argparse.Namespace) -> int:
    from llmroute.demo.main import run_demo
    from llmroute.observe.logging import configure_logging

    configure_logging("error")
    return asyncio.run(run_demo(config, args.prompts, max_tokens=args.max_tokens,
                                concurrency=args.concurrency))


if __name__ == "__main__":
    raise SystemExit(main())
