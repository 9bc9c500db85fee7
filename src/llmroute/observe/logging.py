"""structlog setup: key=value lines on stderr (JSON with ``json=True``)."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    """Configure structlog and the stdlib root logger once, at process start (cli only)."""
    lvl = logging.getLevelName(level.upper())
    logging.basicConfig(level=lvl, stream=sys.stderr, format="%(message)s")
    renderer = (structlog.processors.JSONRenderer() if json
                else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True)
