"""The HTTP/1.1 protocol llmroute's uvicorn servers speak: uvicorn's own (httptools, as
uvicorn's ``auto`` picks when it is installed, which llmroute requires), with bounds on
what a client may make the server hold, and refusals of its own, each an OpenAI-shaped
JSON body (``invalid_request_error``, with an ``x-request-id``), after which the
connection closes (the byte stream can no longer be trusted to hold a next request):

* a request uvicorn cannot parse — a malformed request line, a header with a control
  character or an invalid name, a broken chunked body — gets a 400 ``invalid_http_request``
  instead of uvicorn's plain-text one;
* a request whose line and headers pass ``server.max_header_bytes`` gets a 431
  ``headers_too_large`` (RFC 6585 §5) as soon as they do. uvicorn's httptools protocol sets
  no such bound: a 100 MB header was read whole, taking 300 MB and 13 s of the event loop;
* a request whose line and headers take over ``server.header_timeout_s`` to arrive,
  or whose body stops arriving for ``body_timeout_s`` (while the server itself is reading),
  gets a 408 ``request_timeout`` (RFC 9110 §15.5.9); the app reading that body sees the
  client disconnect. uvicorn bounds neither: a client sending a byte every few seconds (slowloris)
  held its connection, and the request task reading its body, for as long as it liked.

The close lingers, as nginx's does: the answer is sent and the writing side shut (FIN),
and whatever the client still sends is read and dropped for up to ``LINGER_S`` — closing
with unread bytes would reset the connection and could destroy the answer before the
client read it. A 431 or 408 is logged (``http_refused``, with the client's address); uvicorn
logs its own parse errors.

The timeouts are checked by ``sweep``, which the server runs once a second (``SWEEP_TICKS``
of uvicorn's 0.1 s ticks) over its connections, not by a timer per request: a client that
sends its headers and body in two writes (httpx, so the OpenAI SDK, does) would otherwise
arm and cancel one per request (~2-3 µs). A timeout thus fires up to a second late.

Cost per request (~0.4 µs): a Python call around uvicorn's ``data_received`` and each of
its message callbacks, a few flag updates, and a ``loop.time()`` when a read leaves a head
or body incomplete. A head is measured only when the read it ended in could take it past the
bound (``bench/overhead.py`` measures the server as a whole).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import structlog
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmroute.api.errors import new_request_id
from llmroute.config.server import ServerConfig
from llmroute.errors import InvalidRequest, to_openai

log = structlog.get_logger("llmroute.http")
SWEEP_TICKS = 10
"""How many of uvicorn's 0.1 s server ticks pass between two ``sweep``s."""
LINGER_S = 1.0
"""How long a refused connection still reads (and drops) what the client sends before it
closes (s); it closes sooner when the client does."""
_REASONS = {400: b"Bad Request", 408: b"Request Timeout",
            431: b"Request Header Fields Too Large"}


def refusal(status: int, message: str, code: str,
            default_headers: list[tuple[bytes, bytes]], request_id: str | None = None
            ) -> bytes:
    """The whole HTTP/1.1 response with ``status`` (400, 408 or 431): status line,
    ``default_headers`` (uvicorn's ``server``/``date``), the JSON headers (``x-request-id``:
    ``request_id``, else a new one), ``connection: close`` and the OpenAI error body of
    ``message`` and ``code``."""
    _, body = to_openai(InvalidRequest(message, code=code))
    data = orjson.dumps(body)
    head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [b"content-type: application/json\r\n",
             b"content-length: %d\r\n" % len(data),
             b"x-request-id: " + (request_id or new_request_id()).encode() + b"\r\n",
             b"connection: close\r\n\r\n", data]
    return b"".join(head)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of ``limits`` (the config's
    ``server:``, whose ``max_header_bytes``, ``header_timeout_s`` and ``body_timeout_s``
    it reads) and llmroute's refusals (module docstring); pass it as
    ``uvicorn.Config(http=functools.partial(HttpProtocol, limits=…))``
    (``api/server.uvicorn_config`` does)."""

    def __init__(self, *args: Any, limits: ServerConfig = ServerConfig(), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._in_head = True  # reading a request's line and headers (not its body)
        self._head_open = False  # a head's first byte came, its end not yet
        self._head_bytes = 0  # bytes read of it so far, in reads that held nothing else
        self._completed = 0  # requests read whole on this connection
        self._refused = False  # answered with a refusal: what comes now is dropped
        self._read = 0  # bytes of the read being parsed
        self._head_since: float | None = None  # loop time an incomplete head was first seen
        self._body_read: float | None = None  # loop time of an incomplete body's last read

    def data_received(self, data: bytes) -> None:
        """uvicorn's parsing; then the bounds: the head bytes counted (in a read that
        held only head bytes: the head neither ended in it nor began after an earlier
        request's end in it) and refused past ``limits.max_header_bytes``, and the time
        noted when the read left a head or a body incomplete (``check``)."""
        if self._refused:
            return
        counting, completed = self._in_head, self._completed
        self._read = len(data)
        super().data_received(data)
        if self._refused or self.transport.is_closing():
            return
        if self._head_open:
            if counting and self._completed == completed:
                self._head_bytes += len(data)
                if self._head_bytes > self.limits.max_header_bytes:
                    self._too_large()
                    return
            if self._head_since is None:
                self._head_since = self.loop.time()
        elif not self._in_head:  # a body is being read
            self._body_read = self.loop.time()

    def on_message_begin(self) -> None:
        """A request's first byte."""
        self._head_open = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        """The head was read: the bytes that follow are its body. A head that may pass
        ``limits.max_header_bytes`` (the bytes counted and this read's together do) is
        measured and, when it does, refused; the request never reaches the app."""
        limit = self.limits.max_header_bytes
        self._in_head = self._head_open = False
        self._head_since = None
        if self._head_bytes + self._read > limit and _head_size(
                self.url, self.headers) > limit:
            self._too_large()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        """Part of the body, dropped once the request was refused."""
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        """The request was read whole: a next one's head may follow."""
        self._in_head, self._head_bytes = True, 0
        self._completed += 1
        self._body_read = None
        if not self._refused:
            super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        """The refusal of a request uvicorn could not parse (``msg``: uvicorn's words)."""
        self._refuse(400, f"{msg.rstrip('.')}: the bytes sent are not a valid HTTP/1.1 "
                          "request.", "invalid_http_request")

    def check(self, now: float) -> None:
        """Refuse with 408 a head begun over ``limits.header_timeout_s`` ago, or a body with
        no byte for ``limits.body_timeout_s`` (``now``: the loop's time, s). While the
        server has paused reading (its app has not taken what came) the body waits on the
        app, not on the client, and the idle time starts again."""
        if self._refused:
            return
        limits = self.limits
        if self._head_since is not None and now - self._head_since >= limits.header_timeout_s:
            self._late_head()
        elif self._body_read is not None:
            if self.flow.read_paused:
                self._body_read = now
            elif now - self._body_read >= limits.body_timeout_s:
                self._idle_body()

    def _late_head(self) -> None:
        self._refuse(408, f"The request line and headers did not arrive within "
                          f"{self.limits.header_timeout_s:g} s.", "request_timeout")

    def _idle_body(self) -> None:
        """Refuse the stalled body; the app reading it sees the client disconnect."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's receive() answers http.disconnect
            cycle.message_event.set()
            if cycle.response_started:  # an answer is under way: no second one
                self._refused = True
                self.transport.close()
                return
        self._refuse(408, f"The request body stopped arriving: nothing for "
                          f"{self.limits.body_timeout_s:g} s.", "request_timeout")

    def _too_large(self) -> None:
        self._refuse(431, f"The request line and headers take over "
                          f"{self.limits.max_header_bytes} bytes, the most this server "
                          "reads.", "headers_too_large")

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Send the refusal, shut the writing side and close ``LINGER_S`` later, dropping
        what arrives meanwhile (once: a refused request is refused only once)."""
        if self._refused:
            return
        self._refused = True
        request_id = new_request_id()
        if status != 400:  # uvicorn logs its own parse errors
            log.warning("http_refused", status=status, code=code, request_id=request_id,
                        client=self.client[0] if self.client else None)
        transport = self.transport
        transport.write(refusal(status, message, code, self.server_state.default_headers,
                                request_id))
        if transport.can_write_eof():  # TLS cannot half-close
            transport.write_eof()
        self.loop.call_later(LINGER_S, transport.close)


def sweep(connections: Iterable[object], now: float) -> None:
    """``HttpProtocol.check`` each of a server's ``connections`` (its ``server_state``'s:
    other protocols are passed over) at loop time ``now`` (s)."""
    for conn in list(connections):
        if isinstance(conn, HttpProtocol):
            conn.check(now)


def _head_size(url: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """About how many bytes a request line for ``url`` and ``headers`` took (each header
    line's ``": "`` and CRLF counted; the method and version as 16)."""
    return len(url) + 16 + sum(len(name) + len(value) + 4 for name, value in headers)
