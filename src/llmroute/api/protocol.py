"""The HTTP/1.1 protocol llmroute's uvicorn servers speak: uvicorn's own (httptools, as
uvicorn's ``auto`` picks when it is installed, which llmroute requires), with two
refusals of its own, each an OpenAI-shaped JSON body (``invalid_request_error``, with an
``x-request-id``), after which the connection closes (the byte stream can no longer be
trusted to hold a next request). The close lingers, as nginx's does: the answer is sent and
the writing side shut (FIN), and whatever the client still sends is read and dropped for up
to ``LINGER_S`` — closing with unread bytes would reset the connection and could destroy the
answer before the client read it:

* a request uvicorn cannot parse — a malformed request line, a header with a control
  character or an invalid name, a broken chunked body — gets a 400 ``invalid_http_request``
  instead of uvicorn's plain-text one;
* a request whose line and headers pass ``MAX_HEAD_BYTES`` gets a 431
  ``headers_too_large`` (RFC 6585 §5) as soon as they do. uvicorn's httptools protocol sets
  no such bound: a 100 MB header was read whole, taking 300 MB and 13 s of the event loop.

Cost per request: a Python call around uvicorn's ``data_received``, its header and body
callbacks and a few flag updates; a head is measured only when the read it ended in could
take it past the bound (``bench/overhead.py`` measures the server as a whole).
"""

from __future__ import annotations

from typing import Any

import orjson
import uuid_utils
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmroute.errors import InvalidRequest, to_openai

MAX_HEAD_BYTES = 64 * 1024
"""The most bytes a request's line and headers may take (64 KiB: Envoy's default bound is
60 KiB, ``max_request_headers_kb``; nginx's is 4 buffers of 8 KiB; a 10 kB API key fits).
Checked per read, so at most one read (256 KiB) more is buffered before the refusal."""
LINGER_S = 1.0
"""How long a refused connection still reads (and drops) what the client sends before it
closes (s); it closes sooner when the client does."""
_REASONS = {400: b"Bad Request", 431: b"Request Header Fields Too Large"}


def refusal(status: int, message: str, code: str,
            default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The whole HTTP/1.1 response with ``status`` (400 or 431): status line,
    ``default_headers`` (uvicorn's ``server``/``date``), the JSON headers, ``connection:
    close`` and the OpenAI error body of ``message`` and ``code``."""
    _, body = to_openai(InvalidRequest(message, code=code))
    data = orjson.dumps(body)
    head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [b"content-type: application/json\r\n",
             b"content-length: %d\r\n" % len(data),
             b"x-request-id: " + uuid_utils.uuid7().hex.encode() + b"\r\n",
             b"connection: close\r\n\r\n", data]
    return b"".join(head)


class OpenAIErrorsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with llmroute's refusals (module docstring); pass it as
    ``uvicorn.Config(http=…)``."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._in_head = True  # reading a request's line and headers (not its body)
        self._head_bytes = 0  # bytes read of them so far, in reads that held nothing else
        self._completed = 0  # requests read whole on this connection
        self._refused = False  # answered with a refusal: what comes now is dropped
        self._read = 0  # bytes of the read being parsed

    def data_received(self, data: bytes) -> None:
        """uvicorn's parsing; then, when the read held only head bytes (the head neither
        ended in it nor began after an earlier request's end in it), count them and refuse
        with 431 past ``MAX_HEAD_BYTES``."""
        if self._refused:
            return
        counting, completed = self._in_head, self._completed
        self._read = len(data)
        super().data_received(data)
        if not counting or not self._in_head or self._completed != completed \
                or self._refused or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            self._too_large()

    def on_headers_complete(self) -> None:
        """The head was read: the bytes that follow are its body. A head that may pass
        ``MAX_HEAD_BYTES`` (the bytes counted and this read's together do) is measured and,
        when it does, refused; the request never reaches the app."""
        self._in_head = False
        if self._head_bytes + self._read > MAX_HEAD_BYTES and _head_size(
                self.url, self.headers) > MAX_HEAD_BYTES:
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
        if not self._refused:
            super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        """The refusal of a request uvicorn could not parse (``msg``: uvicorn's words)."""
        self._refuse(400, f"{msg.rstrip('.')}: the bytes sent are not a valid HTTP/1.1 "
                          "request.", "invalid_http_request")

    def _too_large(self) -> None:
        self._refuse(431, f"The request line and headers take over {MAX_HEAD_BYTES} bytes, "
                          "the most this server reads.", "headers_too_large")

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Send the refusal, shut the writing side and close ``LINGER_S`` later, dropping
        what arrives meanwhile (once: a refused request is refused only once)."""
        if self._refused:
            return
        self._refused = True
        transport = self.transport
        transport.write(refusal(status, message, code, self.server_state.default_headers))
        if transport.can_write_eof():  # TLS cannot half-close
            transport.write_eof()
        self.loop.call_later(LINGER_S, transport.close)


def _head_size(url: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """About how many bytes a request line for ``url`` and ``headers`` took (each header
    line's ``": "`` and CRLF counted; the method and version as 16)."""
    return len(url) + 16 + sum(len(name) + len(value) + 4 for name, value in headers)
