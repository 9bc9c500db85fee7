"""``GET /openapi.json``: an OpenAPI 3.1 document of every route, built once per app.

Request bodies come from the wire models (``api/wire.py``, ``KeyIn``, the hand-off bodies)
through pydantic's ``model_json_schema``; every 4xx/5xx answer is the OpenAI error body
``{"error": {message, type, param, code}}``. The document is serialised once when the app
is built (``create_app``) and served as the same bytes on every request.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.admin import KeyIn
from llmroute.api.anthropic_wire import CountTokensRequest, MessagesRequest
from llmroute.api.handoffs import AnswerIn, ClaimIn
from llmroute.api.responses_wire import ResponsesRequest
from llmroute.api.wire import ChatCompletionRequest, CompletionRequest, EmbeddingRequest

_REF = "#/components/schemas/{model}"
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]},
                       "code": {"type": ["string", "integer", "null"]}}}}}
"""JSON Schema of the OpenAI error body every 4xx/5xx answer carries."""
ANTHROPIC_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["type", "error"],
    "properties": {"type": {"const": "error"}, "request_id": {"type": "string"},
                   "error": {"type": "object", "required": ["type", "message"],
                             "properties": {"type": {"type": "string"},
                                            "message": {"type": "string"}}}}}
"""JSON Schema of Anthropic's error body, the 4xx/5xx answers of ``/v1/messages*``."""

_OBJECT = {"type": "object"}
_ADMIN: list[dict[str, list[str]]] = [{"bearerAuth": []}, {}]
_OPEN: list[dict[str, list[str]]] = []


def build_openapi(version: str = "0.1.0") -> bytes:
    """The OpenAPI 3.1 document (JSON bytes) of the router's routes; ``version`` is the
    package version it names. Pure: call it once and serve the bytes."""
    schemas: dict[str, Any] = {"Error": ERROR_SCHEMA, "AnthropicError": ANTHROPIC_ERROR_SCHEMA}
    paths = {**_openai_paths(schemas), **_operator_paths(schemas)}
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "llmroute", "version": version,
                 "description": "An OpenAI-compatible routing gateway for LLM inference."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {"Error": {"description": "An OpenAI-shaped error",
                                    "content": _json({"$ref": "#/components/schemas/Error"})},
                          "AnthropicError": {"description": "An Anthropic-shaped error",
                                             "content": _json({
                                                 "$ref": "#/components/schemas/AnthropicError"})}},
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer",
                                               "description": "An API key (auth.enabled)"}}},
        "security": [{"bearerAuth": []}, {}],
    }
    return orjson.dumps(doc)


def openapi_endpoint(document: bytes) -> Any:
    """A Starlette endpoint answering ``document`` (the bytes of ``build_openapi``)."""
    async def openapi(request: Request) -> Response:
        return Response(document, media_type="application/json")

    openapi.__doc__ = "``GET /openapi.json``: this router's OpenAPI 3.1 document."
    return openapi


def _schema(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, Any]:
    """``model``'s JSON Schema, its definitions hoisted into ``schemas``; a $ref to it."""
    body = model.model_json_schema(ref_template=_REF)
    schemas.update(body.pop("$defs", {}))
    schemas[model.__name__] = body
    return {"$ref": _REF.format(model=model.__name__)}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _op(summary: str, ok: dict[str, Any], *, body: dict[str, Any] | None = None,
        params: list[dict[str, Any]] | None = None, status: str = "200",
        security: list[dict[str, list[str]]] | None = None, error: str = "Error"
        ) -> dict[str, Any]:
    """One operation: its 2xx answer ``ok`` (content by media type) and its errors (the
    ``error`` response: OpenAI's, or ``AnthropicError``)."""
    op: dict[str, Any] = {
        "summary": summary, "operationId": _operation_id(summary),
        "responses": {status: {"description": "OK", "content": ok},
                      "4XX": {"$ref": f"#/components/responses/{error}"},
                      "5XX": {"$ref": f"#/components/responses/{error}"}}}
    if body is not None:
        op["requestBody"] = {"required": True, "content": _json(body)}
    if params:
        op["parameters"] = params
    if security is not None:
        op["security"] = security
    return op


def _operation_id(summary: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in summary.split(":")[0]).strip("_")


def _param(name: str, where: str, schema: dict[str, Any], required: bool = False
           ) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path",
            "schema": schema}


def _openai_paths(schemas: dict[str, Any]) -> dict[str, Any]:
    rid = [_param("x-request-id", "header", {"type": "string"})]
    answer = {**_json(_OBJECT), "text/event-stream": {"schema": {"type": "string"}}}
    return {
        "/v1/chat/completions": {"post": _op(
            "create_chat_completion: a chat completion, JSON or SSE", answer,
            body=_schema(ChatCompletionRequest, schemas), params=rid)},
        "/v1/completions": {"post": _op(
            "create_completion: a legacy completion, JSON or SSE", answer,
            body=_schema(CompletionRequest, schemas), params=rid)},
        "/v1/embeddings": {"post": _op(
            "create_embedding: embeddings of the inputs", _json(_OBJECT),
            body=_schema(EmbeddingRequest, schemas), params=rid)},
        "/v1/messages": {"post": _op(
            "create_message: an Anthropic Messages answer, JSON or SSE", answer,
            body=_schema(MessagesRequest, schemas), params=rid, error="AnthropicError")},
        "/v1/messages/count_tokens": {"post": _op(
            "count_message_tokens: the prompt tokens of a Messages request", _json(_OBJECT),
            body=_schema(CountTokensRequest, schemas), error="AnthropicError")},
        "/v1/responses": {"post": _op(
            "create_response: an OpenAI Responses answer, JSON or SSE", answer,
            body=_schema(ResponsesRequest, schemas), params=rid)},
        "/v1/responses/{response_id}": {
            "get": _op("get_response: a stored response", _json(_OBJECT),
                       params=[_param("response_id", "path", {"type": "string"})]),
            "delete": _op("delete_response: forget a stored response", _json(_OBJECT),
                          params=[_param("response_id", "path", {"type": "string"})])},
        "/v1/models": {"get": _op("list_models: the served models", _json(_OBJECT))},
        "/v1/handoffs/{ticket}": {"get": _op(
            "fetch_handoff: a hand-off ticket and its answer", _json(_OBJECT),
            params=[_param("ticket", "path", {"type": "string"})])},
    }


def _operator_paths(schemas: dict[str, Any]) -> dict[str, Any]:
    ticket = [_param("ticket", "path", {"type": "string"})]
    text = {"text/plain": {"schema": {"type": "string"}}}
    limit = _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000})
    return {
        "/health": {"get": _op("health: the process is alive", _json(_OBJECT),
                               security=_OPEN)},
        "/ready": {"get": _op("ready: the router can serve", _json(_OBJECT), security=_OPEN)},
        "/openapi.json": {"get": _op("openapi: this document", _json(_OBJECT),
                                     security=_OPEN)},
        "/dashboard": {"get": _op("dashboard: the operator page",
                                  {"text/html": {"schema": {"type": "string"}}},
                                  security=_OPEN)},
        "/metrics": {"get": _op("metrics: Prometheus exposition", text, security=_ADMIN)},
        **{f"/debug/{name}": {"get": _op(f"debug_{name}: {what}", _json(_OBJECT),
                                         params=params, security=_ADMIN)}
           for name, what, params in (
               ("backends", "backends and their signals", []),
               ("route", "what the router would do with a prompt",
                [_param("query", "query", {"type": "string"}, required=True)]),
               ("strategies", "the strategies", []),
               ("fuse", "the result fuse", []),
               ("requests", "the newest requests", [_param(
                   "limit", "query", {"type": "integer", "minimum": 1, "maximum": 500})]))},
        "/trace/{request_id}": {"get": _op(
            "get_trace: one request's trace", _json(_OBJECT), security=_ADMIN,
            params=[_param("request_id", "path", {"type": "string"}),
                    _param("format", "query", {"type": "string", "enum": ["prov"]})])},
        "/admin/keys": {
            "get": _op("list_keys: the API keys", _json(_OBJECT), security=_ADMIN,
                       params=[_param("tenant", "query", {"type": "string"})]),
            "post": _op("create_key: a new API key", _json(_OBJECT), status="201",
                        body=_schema(KeyIn, schemas), security=_ADMIN)},
        "/admin/keys/{key_id}": {"delete": _op(
            "revoke_key: revoke a key", _json(_OBJECT), security=_ADMIN,
            params=[_param("key_id", "path", {"type": "string"})])},
        "/admin/keys/{key_id}/rotate": {"post": _op(
            "rotate_key: a new secret with the key's settings; the old key is revoked",
            _json(_OBJECT), status="201", security=_ADMIN,
            params=[_param("key_id", "path", {"type": "string"})])},
        "/admin/handoffs": {"get": _op(
            "list_handoffs: hand-off tickets", _json(_OBJECT), security=_ADMIN,
            params=[_param("status", "query",
                           {"type": "string", "enum": ["open", "claimed", "answered"]}),
                    limit])},
        "/admin/handoffs/{ticket}": {"get": _op(
            "show_handoff: one ticket", _json(_OBJECT), params=ticket, security=_ADMIN)},
        "/admin/handoffs/{ticket}/claim": {"post": _op(
            "claim_handoff: take a ticket", _json(_OBJECT), params=ticket,
            body=_schema(ClaimIn, schemas), security=_ADMIN)},
        "/admin/handoffs/{ticket}/answer": {"post": _op(
            "answer_handoff: answer a ticket", _json(_OBJECT), params=ticket,
            body=_schema(AnswerIn, schemas), security=_ADMIN)},
        "/admin/reload": {"post": _op(
            "reload: re-read the config file's pools, backends and routing", _json(_OBJECT),
            security=_ADMIN)},
        "/admin/cache/purge": {"post": _op(
            "purge_cache: remove answer cache entries of a tenant, a key or all",
            _json(_OBJECT), security=_ADMIN)},
    }
