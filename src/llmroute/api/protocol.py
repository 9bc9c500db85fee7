"""The HTTP/1.1 protocol llmroute's uvicorn servers speak: uvicorn's own (httptools, as
uvicorn's ``auto`` picks when it is installed, which llmroute requires), except that a
request it cannot parse — a malformed request line, a header with a control character or
an invalid name, a broken chunked body — is refused with an OpenAI-shaped JSON 400
(``invalid_request_error`` / ``invalid_http_request``, with an ``x-request-id``) instead of
uvicorn's plain-text one. As uvicorn does, the connection then closes: after a parse error
the byte stream cannot be trusted to hold another request.

It costs nothing per request: only the refusal is replaced.
"""

from __future__ import annotations

import orjson
import uuid_utils
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmroute.errors import InvalidRequest, to_openai

CODE = "invalid_http_request"


def bad_request(message: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The whole HTTP/1.1 400 response (status line, ``default_headers`` — uvicorn's
    ``server``/``date`` —, JSON headers, ``connection: close``, body) refusing a request
    that could not be parsed because of ``message`` (ASCII, uvicorn's words)."""
    _, body = to_openai(InvalidRequest(
        f"{message.rstrip('.')}: the bytes sent are not a valid HTTP/1.1 request.",
        code=CODE))
    data = orjson.dumps(body)
    head = [b"HTTP/1.1 400 Bad Request\r\n"]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [b"content-type: application/json\r\n",
             b"content-length: %d\r\n" % len(data),
             b"x-request-id: " + uuid_utils.uuid7().hex.encode() + b"\r\n",
             b"connection: close\r\n\r\n", data]
    return b"".join(head)


class OpenAIErrorsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol answering an unparseable request with ``bad_request``
    (pass it as ``uvicorn.Config(http=…)``)."""

    def send_400_response(self, msg: str) -> None:
        """Write the JSON 400 for ``msg`` and close the connection (what uvicorn's own
        method does, with a plain-text body)."""
        self.transport.write(bad_request(msg, self.server_state.default_headers))
        self.transport.close()
