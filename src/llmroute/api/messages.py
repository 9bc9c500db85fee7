"""``POST /v1/messages`` (Anthropic Messages) and ``POST /v1/messages/count_tokens``.

The Messages surface (``api/surface.py``) is served by the same ``Exchange`` as
``/v1/chat/completions``: its body becomes the chat request (``api/anthropic_wire.py``),
the flow serves it unchanged, and the answer and every refusal leave in Anthropic's shapes
(``api/anthropic_out.py``). Callers authenticate as everywhere (``Authorization: Bearer``
or ``x-api-key``, the header Anthropic clients send; a JWT where ``auth.jwt`` is set);
``anthropic-version`` and ``anthropic-beta`` are accepted and not needed.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.anthropic_out import MessageEvents, error_body, message_of
from llmroute.api.anthropic_wire import parse_count, parse_messages
from llmroute.api.body import read_json
from llmroute.api.errors import on_llmroute_error, on_unexpected, request_id
from llmroute.api.responses import json_response
from llmroute.api.surface import error_fields, reshaped, translated
from llmroute.errors import LLMRouteError
from llmroute.flow import pipeline
from llmroute.policy.auth import Caller
from llmroute.runtime import Runtime
from llmroute.types import ChatRequest, Routed


class Messages:
    """The Anthropic Messages surface (``api = "messages"``)."""

    api = "messages"

    async def request(self, rt: Runtime, body: Any, request_id: str, caller: Caller | None
                      ) -> tuple[ChatRequest, list[str] | None]:
        """See ``Surface.request``: ``parse_messages``; the context is the request's
        ``stop_sequences``."""
        wire, chat = parse_messages(body, request_id)
        return chat, wire.stop_sequences

    async def answer(self, rt: Runtime, request: ChatRequest, stops: list[str] | None,
                     routed: Routed, caller: Caller | None) -> Routed:
        """See ``Surface.answer``: a ``message``, or the stream of Anthropic's events."""
        if routed.stream is None:
            assert routed.body is not None
            return Routed(routed.headers, body=message_of(routed.body, request, stops))
        return Routed(routed.headers, stream=translated(routed.stream,
                                                        MessageEvents(request, stops)))

    def refusal(self, response: Response) -> Response:
        """See ``Surface.refusal``: ``{"type": "error", "error": {type, message}}``."""
        status, body = error_body(response.status_code, error_fields(response),
                                  response.headers.get("x-request-id"))
        return reshaped(response, status, body)


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": n}``, counted by the engine's
    tokenizer where one can count (``TokenCounter.count``: a backend serving ``model``),
    else the character estimate; free of rate limits, as Anthropic's. With auth on it needs
    a usable key that may use ``model``. Errors in Anthropic's shape."""
    rt: Runtime = request.app.state.runtime
    try:
        caller = await pipeline.authenticate(rt, request.headers)
        body = await read_json(request.receive, request.headers.get("content-type"),
                               request.headers.get("content-length"),
                               rt.config.server.max_body_bytes)
        chat = parse_count(body, request_id(request))
        if caller is not None:
            caller.check_model(chat.model)
        if rt.tokens is not None:
            chat = await rt.tokens.count(chat)
    except Exception as exc:
        handler = on_llmroute_error if isinstance(exc, LLMRouteError) else on_unexpected
        return Messages().refusal(await handler(request, exc))
    return json_response({"input_tokens": chat.prompt_tokens},
                         headers={"x-request-id": request_id(request)})
