"""Reading a request body from the ASGI receive channel: chunks, the size limit, a client
that leaves mid-body."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.requests import ClientDisconnect

from llmroute.api.body import read_json
from llmroute.errors import PayloadTooLarge


def _request(messages: list[dict], length: int | None = None) -> tuple:
    """``read_json``'s first three arguments: receive, Content-Type, Content-Length."""
    queue: Iterator[dict] = iter(messages)

    async def receive() -> dict:
        return next(queue)

    return receive, "application/json", None if length is None else str(length)


def _chunks(raw: bytes, size: int) -> list[dict]:
    parts = [raw[i:i + size] for i in range(0, len(raw), size)]
    return [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
            for i, p in enumerate(parts)]


async def test_a_body_in_many_chunks_is_joined():
    raw = b'{"model": "auto", "messages": [{"role": "user", "content": "' + b"x" * 300 + b'"}]}'
    assert await read_json(*_request(_chunks(raw, 7)), 10_000) == {
        "model": "auto", "messages": [{"role": "user", "content": "x" * 300}]}


async def test_the_limit_holds_for_chunked_bodies_without_a_length():
    with pytest.raises(PayloadTooLarge):
        await read_json(*_request(_chunks(b'{"a": "' + b"x" * 500 + b'"}', 64)), 100)


async def test_a_declared_length_over_the_limit_is_refused_before_reading():
    with pytest.raises(PayloadTooLarge):
        await read_json(*_request([], length=101), 100)  # receive would raise if called


async def test_a_client_that_leaves_mid_body_is_a_disconnect():
    messages = [*_chunks(b'{"a": 1', 4)[:1], {"type": "http.disconnect"}]
    messages[0]["more_body"] = True
    with pytest.raises(ClientDisconnect):
        await read_json(*_request(messages), 100)
