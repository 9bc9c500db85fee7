"""uvicorn as llmroute runs it (``api/server.py``): ``X-Forwarded-*`` headers are not read,
so no client passes itself off as another address or scheme, and no request pays for
uvicorn's proxy-headers middleware; a request uvicorn cannot parse gets an OpenAI-shaped
JSON 400, one whose headers pass 64 KiB a 431 as soon as they do, one whose head or body
trickles in past its timeout a 408 (``api/http11.py``), over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx
import pytest
from structlog.testing import capture_logs

from llmroute.api import http11
from llmroute.api.server import serve_in_background
from llmroute.config.server import ServerConfig


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
        try:
            with contextlib.suppress(ConnectionError):  # the server stops reading early
                await writer.drain()
            answer = await asyncio.wait_for(reader.read(), timeout=5)
        finally:
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


async def test_a_configured_bound_refuses_smaller_heads_and_names_itself():
    """``max_header_bytes`` of 4 KiB: a 5 kB header gets the 431 (naming 4096 bytes), a 3 kB
    one is served."""
    limits = ServerConfig(max_header_bytes=4096)
    async with serve_in_background(_no_content, limits=limits) as url:
        big = await _raw(url, b"GET / HTTP/1.1\r\nhost: x\r\nx-pad: " + b"p" * 5000
                         + b"\r\n\r\n")
        small = await _raw(url, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-pad: "
                           + b"p" * 3000 + b"\r\n\r\n")
    status, _, body = _split(big)
    assert status == "HTTP/1.1 431 Request Header Fields Too Large"
    assert "over 4096 bytes" in json.loads(body)["error"]["message"]
    assert small.startswith(b"HTTP/1.1 204 ")


SHORT = ServerConfig(header_timeout_s=0.3, body_timeout_s=0.3)
"""Head and body timeouts of 0.3 s instead of 60 s."""


@pytest.fixture
def short_timeouts(monkeypatch):
    """``SHORT``'s timeouts checked every 0.1 s tick (instead of every second)."""
    monkeypatch.setattr(http11, "SWEEP_TICKS", 1)
    return SHORT


async def _slow(url: str, parts: list[bytes], gap_s: float) -> tuple[bytes, float]:
    """Send ``parts`` ``gap_s`` apart (stopping if the server closes); the answer and the
    time from the first part to the server's close."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    started = time.monotonic()
    read = asyncio.create_task(asyncio.wait_for(reader.read(), timeout=10))
    try:
        for part in parts:
            if read.done():
                break
            writer.write(part)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            await asyncio.sleep(gap_s)
        answer = await read
    finally:
        writer.close()  # the server's shutdown waits for open requests
    return answer, time.monotonic() - started


async def test_a_head_that_trickles_in_gets_a_408(short_timeouts):
    seen = []

    async def app(scope, receive, send):
        seen.append(scope)
        await _no_content(scope, receive, send)

    async with serve_in_background(app, limits=short_timeouts) as url:
        with capture_logs() as logs:
            answer, took = await _slow(url, [b"GET / HTTP/1.1\r\n"] + [b"x-a: b\r\n"] * 20,
                                       0.05)
    status, headers, body = _split(answer)
    assert status == "HTTP/1.1 408 Request Timeout" and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert 0.3 <= took < 0.9 and seen == []
    assert [(e["event"], e["status"], e["client"]) for e in logs] == [
        ("http_refused", 408, "127.0.0.1")]


async def test_a_body_that_stops_coming_gets_a_408_and_the_app_sees_the_client_leave(
        short_timeouts):
    got = []

    async def app(scope, receive, send):
        while True:
            message = await receive()
            got.append(message["type"])
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                return

    async with serve_in_background(app, limits=short_timeouts) as url:
        answer, _ = await _slow(url, [b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n"
                                      b"\r\nabc"], 0.0)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout")
    assert json.loads(_split(answer)[2])["error"]["code"] == "request_timeout"
    assert got[-1] == "http.disconnect"


async def test_slow_but_steady_clients_and_idle_keep_alive_are_served(short_timeouts):
    """A body sent a byte every 0.1 s for 1.5 s (never idle 0.3 s) is read whole; a
    keep-alive connection idle between requests gets no 408; a head sent whole then a
    pause is not late."""
    async with serve_in_background(_no_content, limits=short_timeouts) as url:
        steady, took = await _slow(url, [b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 15\r\n"
                                         b"connection: close\r\n\r\n"] + [b"y"] * 15, 0.1)
        async with httpx.AsyncClient() as client:
            first = await client.get(url + "/")
            await asyncio.sleep(0.6)
            second = await client.get(url + "/")
    assert steady.startswith(b"HTTP/1.1 204 ") and b"x-body-bytes: 15" in steady
    assert took > 1.4
    assert first.status_code == second.status_code == 204
