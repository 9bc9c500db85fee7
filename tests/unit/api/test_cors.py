"""CORS for browser clients: off by default (no header added anywhere); with
``server.cors.allow_origins`` set, preflights are answered and the OpenAI endpoints' answers
(JSON, SSE and errors) carry the allow/expose headers for allowed origins only."""

from __future__ import annotations

import pytest

from llmroute.config import parse_config
from tests.fakes.router import make_config, open_router
from tests.fakes.upstream import serve_upstream

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
APP = "https://app.example"


def _config(base_url: str, **cors):
    backends = [{"id": "a", "pool": "p", "model": "m", "base_url": base_url}]
    return make_config(backends, server={"cors": cors} if cors else {})


async def test_off_by_default_adds_nothing():
    async with serve_upstream(["ok"]) as up, open_router(_config(up.base_url)) as (_, client):
        r = await client.post("/v1/chat/completions", json=CHAT, headers={"origin": APP})
        pre = await client.options("/v1/chat/completions", headers={
            "origin": APP, "access-control-request-method": "POST"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    assert "access-control-allow-origin" not in pre.headers


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_allowed_origin_gets_the_headers_on_answers(stream):
    async with serve_upstream(["ok"]) as up, \
            open_router(_config(up.base_url, allow_origins=[APP])) as (_, client):
        r = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream},
                              headers={"origin": APP})
        other = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream},
                                  headers={"origin": "https://evil.example"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == APP
    assert "x-llmroute-backend" in r.headers["access-control-expose-headers"]
    assert "access-control-allow-origin" not in other.headers


async def test_preflight_and_error_answers():
    async with serve_upstream(["ok"]) as up, \
            open_router(_config(up.base_url, allow_origins=[APP])) as (_, client):
        pre = await client.options("/v1/chat/completions", headers={
            "origin": APP, "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type"})
        bad = await client.post("/v1/chat/completions", json={"model": "auto"},
                                headers={"origin": APP})
        models = await client.get("/v1/models", headers={"origin": APP})
    assert pre.status_code == 200
    assert pre.headers["access-control-allow-origin"] == APP
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert pre.headers["access-control-max-age"] == "600"
    assert bad.status_code == 400 and bad.headers["access-control-allow-origin"] == APP
    assert bad.json()["error"]["param"] == "messages"
    assert models.headers["access-control-allow-origin"] == APP


def test_credentials_with_a_wildcard_origin_is_a_config_error():
    from llmroute.errors import ConfigError
    with pytest.raises(ConfigError, match="allow_credentials"):
        parse_config("""\
server: {cors: {allow_origins: ["*"], allow_credentials: true}}
pools: {p: {}}
backends: [{id: a, pool: p, engine: openai, model: m, base_url: "http://127.0.0.1:9"}]
routing: {default_pool: p}
""", "router.yaml")
