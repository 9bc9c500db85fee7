"""``GET /openapi.json``: built once from the wire models, covering every route, with the
OpenAI error body as every 4xx/5xx answer and a bearer security scheme."""

from __future__ import annotations

import json

from starlette.routing import Route

from fakes.router import make_config, open_router
from llmroute.api.app import create_app
from llmroute.api.openapi import ERROR_SCHEMA, build_openapi
from llmroute.api.wire import ChatCompletionRequest

CONFIG = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])


async def test_the_document_is_served_as_built():
    async with open_router(CONFIG) as (_, client):
        r = await client.get("/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.content == build_openapi()
    doc = r.json()
    assert doc["openapi"] == "3.1.0"
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer", "description": "An API key (auth.enabled)"}


async def test_every_route_and_method_is_documented():
    async with open_router(CONFIG) as (rt, _):
        routes = create_app(CONFIG, runtime=rt).routes
    doc = json.loads(build_openapi())
    served = {(r.path.replace(":path}", "}"), m.lower()) for r in routes
              if isinstance(r, Route) for m in r.methods or () if m != "HEAD"}
    documented = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert served == documented


def test_every_error_answer_is_the_openai_error_body():
    doc = json.loads(build_openapi())
    assert doc["components"]["schemas"]["Error"] == ERROR_SCHEMA
    for path, ops in doc["paths"].items():
        surface = "Anthropic" if path.startswith("/v1/messages") else ""
        ref = {"$ref": f"#/components/responses/{surface}Error"}
        for op in ops.values():
            assert op["responses"]["4XX"] == ref and op["responses"]["5XX"] == ref
            assert any(s.startswith("2") for s in op["responses"])


def test_request_bodies_come_from_the_wire_models():
    doc = json.loads(build_openapi())
    body = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ChatCompletionRequest"}
    chat = doc["components"]["schemas"]["ChatCompletionRequest"]
    assert set(chat["required"]) == {"model", "messages"}
    assert chat["properties"].keys() == ChatCompletionRequest.model_json_schema()[
        "properties"].keys()
    assert "$defs" not in chat and "Message" in doc["components"]["schemas"]
    for name in ("CompletionRequest", "EmbeddingRequest", "KeyIn", "ClaimIn", "AnswerIn"):
        assert name in doc["components"]["schemas"]
