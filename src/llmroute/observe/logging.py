"""structlog setup: one JSON object per line on stderr (orjson, written as bytes), or
key=value lines for reading by eye (``json=False``: structlog's ConsoleRenderer).

Cost of the per-request log line (``observe/observer.py``), rendered and written to a file:
~10 µs as JSON, ~35 µs through the ConsoleRenderer (padding, sorting, styles) — the JSON
renderer is the default (``observe.log_format``) so the line can stay on."""

from __future__ import annotations

import logging
import sys

import orjson
import structlog


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    """Configure structlog and the stdlib root logger once, at process start (cli only)."""
    lvl = logging.getLevelName(level.upper())
    logging.basicConfig(level=lvl, stream=sys.stderr, format="%(message)s")
    if json:
        renderer: structlog.typing.Processor = structlog.processors.JSONRenderer(
            serializer=orjson.dumps)
        factory: structlog.typing.WrappedLogger = structlog.BytesLoggerFactory(
            sys.stderr.buffer)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        factory = structlog.PrintLoggerFactory(sys.stderr)
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=factory, cache_logger_on_first_use=True)
