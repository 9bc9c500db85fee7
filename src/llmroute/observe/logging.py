"""structlog setup: one JSON object per line on stderr (orjson, written as bytes), or
key=value lines for reading by eye (``json=False``: structlog's ConsoleRenderer).

Cost of the per-request log line (``observe/observer.py``), rendered and written to a file:
~10 µs as JSON, ~35 µs through the ConsoleRenderer (padding, sorting, styles) — the JSON
renderer is the default (``observe.log_format``) so the line can stay on.

The request line is the one log call made per request. Through structlog's bound logger
it costs ~87k instructions (callgrind), most of them structlog's call layers: its ~15 fields
are copied as keyword arguments four times on the way through ten Python frames, and the
timestamp is printed by ``datetime.isoformat``. While structlog runs the JSON chain set up
here, ``direct_lines`` hands the Observer that chain's renderer, whose ``info`` writes the
very bytes the chain would (the same keys in the same order, the same ISO UTC timestamp,
rendered by orjson; flushed per line as ``BytesLogger`` does) in one call: ~31k with the
fields' dict and the check (~15k for ``info`` itself). Any other configuration (the console
renderer, a test's ``structlog.testing.capture_logs``) gets the line through structlog.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Any, BinaryIO

import orjson
import structlog

_UTC = datetime.timezone.utc
_DIRECT = orjson.OPT_UTC_Z | orjson.OPT_APPEND_NEWLINE


class JsonLines(structlog.processors.JSONRenderer):
    """The JSON chain's renderer (structlog's ``JSONRenderer`` over ``orjson.dumps``) that
    can also write an ``info`` line to ``stream`` itself (``info``); ``wrapper_class`` and
    ``min_level`` are the chain's level filter."""

    def __init__(self, stream: BinaryIO, wrapper_class: type, min_level: int):
        super().__init__(serializer=orjson.dumps)
        self._write, self._flush = stream.write, stream.flush
        self.wrapper_class, self.min_level = wrapper_class, min_level

    def info(self, event: str, fields: dict[str, Any]) -> None:
        """Write ``fields`` (taken over: ``event``, ``level`` and ``timestamp`` are added to
        it) as the chain writes ``log.info(event, **fields)``: ``add_log_level``, then
        ``TimeStamper(fmt="iso")`` (orjson prints the UTC datetime as ``isoformat`` does,
        ``Z`` for ``+00:00``), then this renderer and ``BytesLogger``'s newline and flush."""
        fields["event"] = event
        fields["level"] = "info"
        fields["timestamp"] = datetime.datetime.now(_UTC)
        self._write(orjson.dumps(fields, default=self._dumps_kw["default"], option=_DIRECT))
        self._flush()


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    """Configure structlog and the stdlib root logger once, at process start (cli only)."""
    lvl = logging.getLevelName(level.upper())
    logging.basicConfig(level=lvl, stream=sys.stderr, format="%(message)s")
    wrapper = structlog.make_filtering_bound_logger(lvl)
    if json:
        renderer: structlog.typing.Processor = JsonLines(sys.stderr.buffer, wrapper, lvl)
        factory: structlog.typing.WrappedLogger = structlog.BytesLoggerFactory(
            sys.stderr.buffer)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        factory = structlog.PrintLoggerFactory(sys.stderr)
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=wrapper, logger_factory=factory, cache_logger_on_first_use=True)


def direct_lines() -> JsonLines | None:
    """The JSON chain's renderer while structlog runs that chain, and its level filter, as
    ``configure_logging`` set them up (then ``JsonLines.info`` writes what ``log.info``
    would, when ``min_level`` lets info lines through); None under any other configuration
    (log through structlog)."""
    config = structlog.get_config()
    procs = config["processors"]
    last = procs[-1] if len(procs) == 3 else None
    if isinstance(last, JsonLines) and config["wrapper_class"] is last.wrapper_class:
        return last
    return None
