"""Bad input gets an OpenAI-shaped 4xx, never a 500 and never a hang."""

from __future__ import annotations

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
GOOD = b'{"model": "auto", "messages": [{"role": "user", "content": "hi"}]}'
JSON = {"content-type": "application/json"}

CASES = [
    ("malformed-json", b'{"model": "auto", "messages": [', JSON, 400, "invalid_json", None),
    ("not-an-object", b"[1, 2]", JSON, 400, "invalid_body", None),
    ("no-content-type", GOOD, {}, 415, "unsupported_media_type", "content-type"),
    ("text-plain", GOOD, {"content-type": "text/plain"}, 415, "unsupported_media_type",
     "content-type"),
    ("missing-messages", b'{"model": "auto"}', JSON, 400, "missing_required_parameter",
     "messages"),
    ("missing-model", b'{"messages": [{"role": "user", "content": "x"}]}', JSON, 400,
     "missing_required_parameter", "model"),
    ("content-int", b'{"model": "auto", "messages": [{"role": "user", "content": 5}]}', JSON,
     400, "invalid_value", "messages[0].content"),
    ("bad-role", b'{"model": "auto", "messages": [{"role": "robot", "content": "x"}]}', JSON,
     400, "invalid_value", "messages[0].role"),
    ("empty-messages", b'{"model": "auto", "messages": []}', JSON, 400, "invalid_value",
     "messages"),
    ("stream-string", b'{"model": "auto", "stream": "yes", "messages": '
     b'[{"role": "user", "content": "x"}]}', JSON, 400, "invalid_value", "stream"),
    ("n-two-streamed", b'{"model": "auto", "n": 2, "stream": true, "messages": '
     b'[{"role": "user", "content": "x"}]}', JSON, 400, "invalid_value", "n"),
    ("max-tokens-zero", b'{"model": "auto", "max_tokens": 0, "messages": '
     b'[{"role": "user", "content": "x"}]}', JSON, 400, "invalid_value", "max_tokens"),
    ("unknown-model", b'{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}',
     JSON, 404, "model_not_found", "model"),
    ("too-large", b'{"model": "auto", "messages": [{"role": "user", "content": "'
     + b"x" * 5000 + b'"}]}', JSON, 413, "payload_too_large", None),
]


@pytest.mark.parametrize(("body", "headers", "status", "code", "param"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_bad_input_gets_openai_error(body, headers, status, code, param):
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          server={"max_body_bytes": 4096})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, content=body, headers=headers)
        assert up.requests == []
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["param"] == param and err["message"]


@pytest.mark.parametrize(("method", "path", "status"),
                         [("GET", "/v1/nope", 404), ("GET", CHAT, 405)], ids=["path", "method"])
async def test_unknown_route_is_openai_shaped(method, path, status):
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    async with open_router(cfg) as (_, client):
        r = await client.request(method, path)
    assert r.status_code == status
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


async def test_context_too_long_for_every_backend_is_400():
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9",
                        "context_length": 64}])
    body = {"model": "auto", "messages": [{"role": "user", "content": "word " * 200}]}
    async with open_router(cfg) as (_, client):
        r = await client.post(CHAT, json=body)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


async def test_upstream_4xx_is_returned_not_retried():
    async with serve_upstream([("status", 400)]) as bad, serve_upstream(["ok"]) as good:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": bad.base_url},
                           {"id": "b", "pool": "general", "base_url": good.base_url}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json={"model": "auto", "messages": [
                {"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": "scripted 400", "type": "server_error",
                                 "param": None, "code": "upstream_status_error"}
    assert len(bad.requests) == 1 and good.requests == []


class _BrokenStrategy:
    """A strategy with a bug: every plan raises."""

    def plan(self, request, intent):
        raise RuntimeError("bug")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_bug_is_an_openai_shaped_500_with_the_request_id(stream):
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    async with open_router(cfg) as (rt, client):
        rt.strategy = _BrokenStrategy()
        r = await client.post(CHAT, headers={"x-request-id": "req-7"}, json={
            "model": "auto", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
        after = await client.get("/health")
    assert r.status_code == 500 and r.headers["x-request-id"] == "req-7"
    assert r.json()["error"]["code"] == "internal_error"
    assert after.status_code == 200


@pytest.mark.parametrize(("exc", "header"), [
    ("no-backend", "3"), ("rate-limited", "3"), ("draining", "3"), ("short", "1")])
async def test_retry_after_is_rounded_up_to_whole_seconds_for_every_refusal(
        exc: str, header: str) -> None:
    from starlette.requests import Request

    from llmroute.api.errors import on_llmroute_error
    from llmroute.errors import NoBackendAvailable, RateLimited, ShuttingDown
    made = {"no-backend": NoBackendAvailable("none", retry_after_s=2.2),
            "rate-limited": RateLimited("slow down", retry_after_s=2.2),
            "draining": ShuttingDown("draining", retry_after_s=2.2),
            "short": NoBackendAvailable("none", retry_after_s=0.2)}[exc]
    request = Request({"type": "http", "method": "POST", "path": "/", "headers": []})
    response = await on_llmroute_error(request, made)
    assert response.headers["retry-after"] == header
