"""Request checks that real engines make, for the scripted upstream (``fakes/upstream.py``):
each rule looks at a request body and answers the engine's own refusal — its status, error
body and words — or None when the engine takes the body. Every rule names the engine source
it copies.

A rule is ``(body, path) -> (status, json) | None``; ``path`` is the request's path
(``/v1/chat/completions`` or ``/v1/completions``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Refusal = tuple[int, dict[str, Any]]
Rule = Callable[[dict[str, Any], str], Refusal | None]

CHAT = "/v1/chat/completions"


def _vllm_error(message: str, param: str | None = None) -> Refusal:
    """vLLM's error body: ``ErrorResponse(error=ErrorInfo(message, type, param, code))``
    (``vllm/entrypoints/openai/engine/protocol.py``), 400 ``BadRequestError``."""
    return 400, {"error": {"message": message, "type": "BadRequestError", "param": param,
                           "code": 400}}


def _ollama_error(message: str) -> Refusal:
    """Ollama's OpenAI-layer error: ``NewError(http.StatusBadRequest, err.Error())``
    (``openai/openai.go``: type ``invalid_request_error``, param and code null)."""
    return 400, {"error": {"message": message, "type": "invalid_request_error",
                           "param": None, "code": None}}


def vllm_stream_options(body: dict[str, Any], path: str) -> Refusal | None:
    """vLLM ``ChatCompletionRequest.validate_stream_options``
    (``vllm/entrypoints/openai/chat_completion/protocol.py`` @ 002032ee):
    ``if data.get("stream_options") and not data.get("stream"): raise VLLMValidationError(
    "Stream options can only be defined when `stream=True`.", parameter="stream_options")``."""
    if body.get("stream_options") and not body.get("stream"):
        return _vllm_error("Stream options can only be defined when `stream=True`.",
                           "stream_options")
    return None


def vllm_alternating_template(body: dict[str, Any], path: str) -> Refusal | None:
    """vLLM serving a model whose chat template is Llama-2/Mistral-instruct's (the system
    message taken out first, then ``{% if (message['role'] == 'user') != (loop.index0 % 2 ==
    0) %}{{ raise_exception('Conversation roles must alternate
    user/assistant/user/assistant/...') }}``): a ``developer`` message is not taken out, so
    it breaks the alternation. vLLM's ``serving_chat.create_chat_completion`` answers the
    template's error with ``self.create_error_response(f"{e} {e.__cause__}")`` (400)."""
    roles = [m.get("role") for m in body.get("messages") or []]
    if roles and roles[0] == "system":
        roles = roles[1:]
    if path == CHAT and any((r == "user") != (i % 2 == 0) for i, r in enumerate(roles)):
        return _vllm_error("Conversation roles must alternate user/assistant/user/assistant/"
                           "... None")
    return None


def ollama_null_content(body: dict[str, Any], path: str) -> Refusal | None:
    """Ollama ``FromChatRequest`` (``openai/openai.go`` line 630 @ fb307609): ``default: if
    msg.ToolCalls == nil { return nil, fmt.Errorf("invalid message content type: %T",
    content) }`` — as Ollama 0.13+ answers an assistant tool-call turn with ``content:
    null`` (pydantic/pydantic-ai#5206)."""
    for m in body.get("messages") or []:
        if "content" in m and m["content"] is None:
            return _ollama_error("invalid message content type: <nil>")
    return None


def ollama_list_stop(body: dict[str, Any], path: str) -> Refusal | None:
    """Ollama v0.1.49 ``fromCompleteRequest`` (``openai/openai.go`` line 345 @ d626b99b):
    ``case []string`` never matches a decoded JSON list, so ``default: return …,
    fmt.Errorf("invalid type for 'stop' field: %T", r.Stop)`` (ollama/ollama#5545)."""
    if path == "/v1/completions" and isinstance(body.get("stop"), list):
        return _ollama_error("invalid type for 'stop' field: []interface {}")
    return None


def ollama_string_content(body: dict[str, Any], path: str) -> Refusal | None:
    """Ollama up to v0.2.5 (``openai/openai.go`` @ 057d3186): ``Message.Content`` is a Go
    ``string`` (line 31) and ``ChatMiddleware`` answers ``c.ShouldBindJSON(&req)``'s error
    with ``NewError(http.StatusBadRequest, err.Error())`` (lines 647-649): Go's
    ``json.UnmarshalTypeError`` words."""
    for m in body.get("messages") or []:
        if isinstance(m.get("content"), list):
            return _ollama_error("json: cannot unmarshal array into Go struct field "
                                 "ChatCompletionRequest.messages.content of type string")
    return None


def refusal(rules: tuple[Rule, ...], body: dict[str, Any], path: str) -> Refusal | None:
    """The first refusal among ``rules`` for ``body`` at ``path``, else None."""
    for rule in rules:
        answer = rule(body, path)
        if answer is not None:
            return answer
    return None
