"""uvicorn as llmroute runs it (``api/server.py``): ``X-Forwarded-*`` headers are not read,
so no client passes itself off as another address or scheme, and no request pays for
uvicorn's proxy-headers middleware; a request uvicorn cannot parse gets an OpenAI-shaped
JSON 400, and one whose headers pass 64 KiB a 431 as soon as they do (``api/protocol.py``),
over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import pytest

from llmroute.api.server import serve_in_background


async def test_forwarded_headers_change_neither_the_client_nor_the_scheme():
    seen = []

    async def app(scope, receive, send):
        seen.append((scope["client"][0], scope["scheme"]))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with serve_in_background(app) as url, httpx.AsyncClient() as client:
        r = await client.get(url + "/", headers={"x-forwarded-for": "203.0.113.9",
                                                 "x-forwarded-proto": "https"})
    assert r.status_code == 204 and seen == [("127.0.0.1", "http")]


async def _raw(url: str, data: bytes) -> bytes:
    """What the server at ``url`` answers to ``data`` sent as is, until it closes."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), timeout=5)
    finally:
        writer.close()


def _split(answer: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    return status, dict(line.lower().split(": ", 1) for line in lines), body


@pytest.mark.parametrize("request_bytes", [
    b"GET / HTTP/1.1\r\nhost: x\r\nx-bad: a\x01b\r\n\r\n",  # a control character in a value
    b"GET / HTTP/1.1\r\nhost: x\r\nbad header: y\r\n\r\n",  # a space in a header name
    b"THIS IS NOT HTTP\r\n\r\n",
    b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
], ids=["control-char", "header-name", "request-line", "chunk-size"])
async def test_an_unparseable_request_gets_an_openai_shaped_json_400(request_bytes):
    called = []

    async def app(scope, receive, send):
        called.append(scope)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with serve_in_background(app) as url:
        answer = await _raw(url, request_bytes)
        fine = await _raw(url, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    status, headers, body = _split(answer)
    assert status == "HTTP/1.1 400 Bad Request"
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close" and int(headers["content-length"]) == len(body)
    assert len(headers["x-request-id"]) == 32 and "date" in headers
    error = json.loads(body)["error"]
    assert error == {"message": error["message"], "type": "invalid_request_error",
                     "param": None, "code": "invalid_http_request"}
    assert error["message"].startswith("Invalid HTTP request received")
    assert fine.startswith(b"HTTP/1.1 204 ")  # the server goes on serving
    if not request_bytes.startswith(b"POST"):  # refused before the app saw it
        assert len(called) == 1


async def _no_content(scope, receive, send):
    body = b""
    while True:  # read the whole body, as an endpoint does
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 204,
                "headers": [(b"x-body-bytes", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": b""})


@pytest.mark.parametrize("size, end", [(100_000, b""), (20_000_000, b""),
                                       (70_000, b"\r\n\r\n"), (70_000, b"\r\n\r\nxyz"),
                                       (300_000, b"\r\n\r\n")],
                         ids=["100k-open", "20m-open", "70k-whole", "70k-body", "300k-whole"])
async def test_headers_over_64_kib_get_a_431_before_they_are_read_whole(size, end):
    """Refused while they are still arriving, or once whole (in one read or several)."""
    async with serve_in_background(_no_content) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        head = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3" if end.endswith(b"xyz") \
            else b"GET / HTTP/1.1\r\nhost: x"
        writer.write(head + b"\r\nx-big: " + b"a" * size + end)
        with contextlib.suppress(ConnectionError):  # the server stops reading before the end
            await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=5)
        writer.close()
        fine = await _raw(url, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    status, headers, body = _split(answer)
    assert status == "HTTP/1.1 431 Request Header Fields Too Large"
    assert headers["connection"] == "close" and headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "headers_too_large"
    assert "65536 bytes" in json.loads(body)["error"]["message"]
    assert fine.startswith(b"HTTP/1.1 204 ")


async def test_large_bodies_and_keep_alive_requests_are_not_counted_as_headers():
    """A 10 kB header passes; a 2 MB body (read in many 64-256 KiB reads) is no head; 40
    requests on one connection, each with 4 kB of headers, are 40 heads of 4 kB."""
    async with serve_in_background(_no_content) as url, httpx.AsyncClient() as client:
        big_key = await client.get(url + "/", headers={"x-api-key": "k" * 10_000})
        body = await client.post(url + "/", content=b"x" * 2_000_000)
        many = [await client.get(url + "/", headers={"x-pad": "p" * 4000}) for _ in range(40)]
    assert big_key.status_code == 204
    assert body.status_code == 204 and body.headers["x-body-bytes"] == "2000000"
    assert [r.status_code for r in many] == [204] * 40
