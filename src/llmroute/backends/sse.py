"""Server-Sent Events codec: an incremental decoder for engine streams, encoders for clients.

Follows the WHATWG HTML "event stream interpretation" (§9.2.6), with these choices:

* Bytes are split into lines *before* UTF-8 decoding, so a chunk boundary inside a multibyte
  character is harmless; each complete line is decoded with ``errors="replace"``. A UTF-8
  BOM is stripped from the very first line only.
* Line ends are CRLF, LF or a lone CR; a CR ending one chunk and an LF starting the next is
  one line end.
* ``SSEEvent.id`` is the stream's *last event ID* at dispatch time, as the spec's
  ``lastEventId``: it persists across events until another valid ``id:`` field changes it.
  ``SSEEvent.retry_ms`` likewise is the stream's reconnection time (the last valid ``retry:``
  value seen, in milliseconds), or None when none was sent. ``retry:`` values over 18 digits
  are ignored (Python refuses to parse very long integers; no such value is meaningful).
* Deliberate leniency: the spec discards an event that the stream ends in the middle of.
  :meth:`SSEDecoder.close` instead treats an unterminated final line as a line and dispatches
  a pending event whose data buffer is non-empty, so a truncated last event reaches the
  caller, which fails to parse its JSON and reports a protocol error instead of silently
  losing it.
* The partial-line buffer is bounded by ``max_line_bytes``; exceeding it raises
  :class:`~llmroute.errors.UpstreamProtocolError`.

The decoder does no I/O and holds only per-stream state; use one instance per stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from llmroute.errors import UpstreamProtocolError

DONE = b"data: [DONE]\n\n"
"""The OpenAI end-of-stream sentinel event, in wire form."""

_BOM = b"\xef\xbb\xbf"
_MAX_RETRY_DIGITS = 18
_DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    ``data``: the ``data:`` lines joined with ``"\\n"`` (may be ``""``); ``event``: the event
    type (``"message"`` when none was given); ``id``: the stream's last event ID (None until an
    ``id:`` field was seen); ``retry_ms``: the stream's reconnection time in ms, or None.
    """

    data: str
    event: str = "message"
    id: str | None = None
    retry_ms: int | None = None


class SSEDecoder:
    """Incremental SSE parser: bytes in arbitrary chunks → :class:`SSEEvent` lists.

    Call :meth:`feed` with each chunk as it arrives and :meth:`close` once at end of stream.
    After an :class:`~llmroute.errors.UpstreamProtocolError` the stream must be abandoned.
    """

    __slots__ = ("_max_line_bytes", "_pending", "_skip_lf", "_first_line",
                 "_data", "_event", "_last_id", "_retry_ms")

    def __init__(self, max_line_bytes: int = _DEFAULT_MAX_LINE_BYTES) -> None:
        """``max_line_bytes``: the most bytes an unterminated line may buffer (> 0)."""
        if max_line_bytes <= 0:
            raise ValueError(f"max_line_bytes must be positive, got {max_line_bytes}")
        self._max_line_bytes = max_line_bytes
        self._pending = bytearray()  # bytes of the current, unterminated line
        self._skip_lf = False  # the last chunk ended in CR: a leading LF is its CRLF half
        self._first_line = True  # the BOM may only be stripped from the first line
        self._data: list[str] = []  # the data buffer, one item per data line
        self._event = ""  # the event type buffer
        self._last_id: str | None = None
        self._retry_ms: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk`` (any length, split anywhere); return the events it completed.

        Raises :class:`~llmroute.errors.UpstreamProtocolError` when the unterminated line
        grows past ``max_line_bytes``.
        """
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if cut < 0:
            self._pending += chunk
            self._check_pending()
            return []
        complete = chunk[: cut + 1]
        if self._pending:
            complete = bytes(self._pending) + complete
        self._pending = bytearray(chunk[cut + 1:])
        self._skip_lf = cut == len(chunk) - 1 and chunk[cut] == 0x0D
        self._check_pending()
        return self._process(complete.splitlines())

    def close(self) -> list[SSEEvent]:
        """End of stream: return the events still pending (see the module's leniency note).

        An unterminated final line is processed as a line, then a pending event with a
        non-empty data buffer is dispatched. Calling it again returns ``[]``.
        """
        lines = [bytes(self._pending)] if self._pending else []
        self._pending = bytearray()
        self._skip_lf = False
        events = self._process(lines)
        last = self._dispatch()
        if last is not None:
            events.append(last)
        return events

    def _check_pending(self) -> None:
        """Raise UpstreamProtocolError if the unterminated line exceeds the limit."""
        size = len(self._pending)
        if size > self._max_line_bytes:
            self._pending = bytearray()
            raise UpstreamProtocolError(
                f"SSE line longer than {self._max_line_bytes} bytes without a line end "
                f"({size} bytes buffered)")

    def _process(self, lines: list[bytes]) -> list[SSEEvent]:
        """Interpret complete lines (terminators removed); return the events dispatched."""
        if lines and self._first_line:
            self._first_line = False
            if lines[0].startswith(_BOM):
                lines[0] = lines[0][len(_BOM):]
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                event = self._dispatch()
                if event is not None:
                    events.append(event)
            elif line[0] != 0x3A:  # lines starting with ':' are comments
                self._field(line)
        return events

    def _field(self, line: bytes) -> None:
        """Apply one non-empty, non-comment line ``name[:[ ]value]`` to the event buffers."""
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry":
            if value.isdigit() and len(value) <= _MAX_RETRY_DIGITS:
                self._retry_ms = int(value)

    def _dispatch(self) -> SSEEvent | None:
        """End the current event (blank line): return it, or None if its data buffer is empty."""
        data, event_type = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return SSEEvent("\n".join(data), event_type or "message", self._last_id, self._retry_ms)


def encode_json(obj: Any) -> bytes:
    """``obj`` as one SSE ``data:`` event, serialised with orjson. The hot path for OpenAI
    chunks: compact JSON never contains a line break, so one ``data:`` line always suffices
    (``encode_event`` handles arbitrary text)."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def encode_event(data: str, *, event: str | None = None, id: str | None = None) -> bytes:
    """Encode one event in SSE wire form (UTF-8, ``\\n`` line ends, blank-line terminated).

    ``event:`` and ``id:`` lines come first when given, then one ``data: `` line per line of
    ``data`` (split on CRLF, LF or CR; SSE cannot carry CR, so line ends decode as ``\\n``).
    ``data=""`` encodes as ``b"data: \\n\\n"``, which decodes to an event with empty data.

    Raises ValueError if ``event`` or ``id`` contains CR or LF, or ``id`` contains NUL
    (either would not survive decoding); UnicodeEncodeError for lone surrogates.
    """
    head = ""
    if event is not None:
        _check_field_value("event", event)
        head = f"event: {event}\n"
    if id is not None:
        _check_field_value("id", id)
        if "\0" in id:
            raise ValueError("SSE id must not contain NUL")
        head += f"id: {id}\n"
    body = "\ndata: ".join(_split_lines(data))
    return f"{head}data: {body}\n\n".encode()


def encode_comment(text: str) -> bytes:
    """Encode a comment (keep-alive) as ``b": text\\n\\n"``; decoders ignore it.

    Each line of a multi-line ``text`` gets its own ``": "`` prefix, so it stays a comment.
    """
    body = "\n: ".join(_split_lines(text))
    return f": {body}\n\n".encode()


def _check_field_value(name: str, value: str) -> None:
    """Raise ValueError if ``value`` would break the line framing of field ``name``."""
    if "\n" in value or "\r" in value:
        raise ValueError(f"SSE {name} must not contain CR or LF: {value!r}")


def _split_lines(text: str) -> list[str]:
    """Split ``text`` on CRLF, LF or CR (only these; unlike ``str.splitlines``); ≥ 1 item."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
