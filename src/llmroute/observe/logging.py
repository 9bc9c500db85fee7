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
rendered by orjson) in one call: ~31k with the fields' dict and the check (~15k for
``info`` itself). Any other configuration (the console renderer, a test's
``structlog.testing.capture_logs``) gets the line through structlog.

Buffering (as nginx's ``access_log … buffer= flush=``): with the JSON chain on a stderr that
has a file descriptor, every log line — structlog's, the root logger's handler's and the
request lines — goes through one ``io.BufferedWriter`` of ``HOLD_BYTES`` over that
descriptor (``held_stream``). Other lines are flushed as they are written (with the request
lines held before them, in order, in one ``write``); request lines are held: the buffer goes
out when the next line would not fit (whole lines only, so each ``write`` is at most
``PIPE_BUF`` bytes and stays atomic on a pipe that other processes share), else at the
latest ``FLUSH_S`` after the first held line (a timer on the running event loop), and at
shutdown (``Observer.close``; the ``logging`` module's exit hook flushes too). So the write
system call per request becomes one per ~10 lines at load, one per ``FLUSH_S`` when idle.
A crash that skips both (SIGKILL, a fault in C code) loses the held lines: at most
``HOLD_BYTES`` bytes, at most the last ``FLUSH_S`` of request lines. Anything written to
``sys.stderr`` by other means (``print``, a traceback, a logger with a handler of its own
such as uvicorn's) is not held back and may land before request lines that were still
held. Without a file descriptor (a test's captured stderr), or outside a running event
loop, each line is flushed as it is written, as before.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import logging
import select
import sys
from typing import Any, BinaryIO, TextIO

import orjson
import structlog

_UTC = datetime.timezone.utc
_DIRECT = orjson.OPT_UTC_Z | orjson.OPT_APPEND_NEWLINE
HOLD_BYTES = getattr(select, "PIPE_BUF", 4096)
"""The log buffer's size (bytes): the most a single write of held lines carries."""
FLUSH_S = 0.1
"""The longest a request line is held before it is written (s)."""


class JsonLines(structlog.processors.JSONRenderer):
    """The JSON chain's renderer (structlog's ``JSONRenderer`` over ``orjson.dumps``) that
    can also write an ``info`` line to ``stream`` itself (``info``); ``wrapper_class`` and
    ``min_level`` are the chain's level filter. ``hold``: ``stream`` is ``held_stream``'s
    buffer, and request lines wait in it (``flush``) instead of being flushed one by one."""

    def __init__(self, stream: BinaryIO, wrapper_class: type, min_level: int, *,
                 hold: bool = False):
        super().__init__(serializer=orjson.dumps)
        self._write, self._flush = stream.write, stream.flush
        self.wrapper_class, self.min_level = wrapper_class, min_level
        self._hold = hold
        self._timer: asyncio.TimerHandle | None = None

    def info(self, event: str, fields: dict[str, Any]) -> None:
        """Write ``fields`` (taken over: ``event``, ``level`` and ``timestamp`` are added to
        it) as the chain writes ``log.info(event, **fields)``: ``add_log_level``, then
        ``TimeStamper(fmt="iso")`` (orjson prints the UTC datetime as ``isoformat`` does,
        ``Z`` for ``+00:00``), then this renderer and ``BytesLogger``'s newline; held in the
        buffer when ``hold`` (written within ``FLUSH_S``), else flushed at once."""
        fields["event"] = event
        fields["level"] = "info"
        fields["timestamp"] = datetime.datetime.now(_UTC)
        self._write(orjson.dumps(fields, default=self._dumps_kw["default"], option=_DIRECT))
        if self._timer is None:
            self._later()

    def flush(self) -> None:
        """Write the held lines now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._flush()

    def _later(self) -> None:
        """Flush ``FLUSH_S`` from now on the running loop (at once without one, or when
        lines are not held)."""
        try:
            loop = asyncio.get_running_loop() if self._hold else None
        except RuntimeError:
            loop = None
        if loop is None:
            self._flush()
        else:
            self._timer = loop.call_later(FLUSH_S, self.flush)


class _TextLines:
    """The stdlib ``logging`` handler's stream: its text lines, encoded as ``text`` (the
    stderr they replace) encodes them, into ``stream`` and flushed there (what
    ``logging.StreamHandler`` calls: ``write``, ``flush``)."""

    def __init__(self, stream: io.BufferedWriter, text: TextIO):
        self._stream = stream
        self._encoding, self._errors = text.encoding or "utf-8", text.errors or "strict"

    def write(self, text: str) -> int:
        """Write ``text`` into the buffer; returns its length in characters."""
        self._stream.write(text.encode(self._encoding, self._errors))
        return len(text)

    def flush(self) -> None:
        """Write the buffer (the lines held before this one first)."""
        self._stream.flush()


def held_stream(text: TextIO) -> io.BufferedWriter | None:
    """A buffered writer of ``HOLD_BYTES`` over ``text``'s file descriptor (its own
    ``FileIO`` that never closes the descriptor; ``text``'s buffer is flushed first), or
    None when ``text`` has no descriptor."""
    try:
        fd = text.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    text.flush()
    return io.BufferedWriter(io.FileIO(fd, "wb", closefd=False), HOLD_BYTES)


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    """Configure structlog and the stdlib root logger once, at process start (cli only):
    with ``json``, both write through one buffered stream over stderr (``held_stream``,
    module docstring)."""
    lvl = logging.getLevelName(level.upper())
    wrapper = structlog.make_filtering_bound_logger(lvl)
    held = held_stream(sys.stderr) if json else None
    stdlib: Any = sys.stderr if held is None else _TextLines(held, sys.stderr)
    logging.basicConfig(level=lvl, stream=stdlib, format="%(message)s")
    if json:
        binary = held or sys.stderr.buffer
        renderer: structlog.typing.Processor = JsonLines(binary, wrapper, lvl,
                                                         hold=held is not None)
        factory: structlog.typing.WrappedLogger = structlog.BytesLoggerFactory(binary)
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
