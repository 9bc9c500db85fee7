"""Upstream rate limits and error shapes, over scripted upstreams on loopback: a 429 nobody
else can serve goes on as a 429 whose ``Retry-After`` comes from the engine (seconds, an
HTTP-date, or OpenAI's ``x-ratelimit-reset-*`` durations); a mid-stream 429 keeps its meaning
in the error event; vLLM's top-level error shape becomes an OpenAI error body."""

from __future__ import annotations

import email.utils
import time

import pytest
from fakes.router import make_config, open_router
from fakes.streams import events
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def one(up):
    return make_config([{"id": "b0", "pool": "general", "base_url": up.base_url}])


def http_date(in_s: float) -> str:
    return email.utils.formatdate(time.time() + in_s, usegmt=True)


@pytest.mark.parametrize(("headers", "low", "high"), [
    ({"Retry-After": "7"}, 7, 7),
    ({"Retry-After": "in 30 s"}, 28, 31),
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s",
      "x-ratelimit-remaining-tokens": "900", "x-ratelimit-reset-tokens": "1s"}, 360, 360),
    ({"x-ratelimit-reset-tokens": "1m30s"}, 90, 90),
], ids=["seconds", "http-date", "reset-requests", "reset-tokens"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_429_nobody_else_can_serve_is_a_429_with_the_engines_retry_after(
        headers, low, high, stream):
    headers = {k: http_date(30) if v == "in 30 s" else v for k, v in headers.items()}
    async with serve_upstream([("status", 429, headers)]) as up, \
            open_router(one(up)) as (_, client):
        r = await client.post(CHAT, json={**BODY, "stream": stream})
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert low <= int(r.headers["retry-after"]) <= high


async def test_a_mid_stream_429_keeps_its_meaning_in_the_error_event():
    limit = '{"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded", ' \
        '"code": 429}}'
    first = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}
    async with serve_upstream([("raw", [first, limit])]) as up, \
            open_router(one(up)) as (_, client):
        r = await client.post(CHAT, json={**BODY, "stream": True})
    assert events(r.text)[-1]["error"]["code"] == "rate_limit_exceeded"


async def test_vllms_top_level_error_shape_is_an_openai_error_body():
    async with serve_upstream([("context", "vllm")]) as up, \
            open_router(one(up)) as (_, client):
        r = await client.post(CHAT, json=BODY)
    err = r.json()["error"]
    assert r.status_code == 400 and set(err) == {"message", "type", "param", "code"}
    assert err["message"].startswith("This model's maximum context length is 2048 tokens")
    assert err["type"] == "BadRequestError"
