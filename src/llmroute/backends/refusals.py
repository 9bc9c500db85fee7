"""An engine's refusal of a body shape it does not take, recognised from its own answer.

Some engines refuse a request only for its form: a ``developer`` message their chat template
does not know, a list ``stop``, text parts where they expect a string, ``content: null`` on
an assistant tool-call turn, ``stream_options`` on a non-streamed call. The same request in
the form the engine takes would be served. ``recognise`` reads an engine's 4xx (or a 500
that carries a JSON error: llama-server answers a template exception with 500) and names the
one ``Quirks`` change that reshapes the body as the engine wants — only when the body really
had that shape and the backend's quirks still sent it, so a refusal is never blamed on a
shape the body did not have, and no change is proposed twice.

Engine words each rule reads (the scripted upstreams copy them: ``tests/fakes/engine_rules.py``):

* ``stream_options`` — vLLM ``validate_stream_options``: "Stream options can only be defined
  when `stream=True`."; OpenAI: "The 'stream_options' parameter is only allowed when
  'stream' is enabled."
* ``developer_role`` — a chat template that alternates roles after the system message
  (Llama-2, Mistral-instruct): "Conversation roles must alternate user/assistant/…" (vLLM
  ``serving_chat``, 400); SGLang before the ``developer`` role: "Input should be 'system',
  'assistant', 'tool' or 'function'" on ``…role``; templates' "Only user and assistant roles
  are supported!".
* ``tool_call_content`` — Ollama ``FromChatRequest``: "invalid message content type: <nil>".
* ``string_content`` — Ollama ≤ 0.2.5: "json: cannot unmarshal array into Go struct field
  ChatCompletionRequest.messages.content of type string"; a template concatenating
  ``content``: "can only concatenate str (not "list") to str".
* ``list_stop`` — Ollama 0.1.49 ``/v1/completions``: "invalid type for 'stop' field:
  []interface {}"; OpenAI-style limits: "Invalid 'stop': array too long".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from llmroute.backends.engines import Quirks
from llmroute.errors import BackendError, UpstreamStatusError

Change = dict[str, Any]
"""``Quirks`` field → value."""

_STREAM_OPTIONS = re.compile(r"stream.?options", re.IGNORECASE)
_ROLE = re.compile(r"\bdeveloper\b|\broles?\b", re.IGNORECASE)
_NULL_CONTENT = re.compile(r"content.{0,40}(<nil>|\bnull\b|\bnone\b)|got null",
                           re.IGNORECASE)
_PART_CONTENT = re.compile(r"content.{0,60}\b(array|list)\b|\b(array|list)\b.{0,60}content|"
                           r"concatenate str \(not .list.\)", re.IGNORECASE)
_STOP = re.compile(r"\bstop\b", re.IGNORECASE)


def refused_shape(err: BackendError) -> bool:
    """True for an engine's answer that may refuse a body's form: HTTP 400 or 422, or a 500
    with a JSON error body."""
    if not isinstance(err, UpstreamStatusError):
        return False
    status = err.upstream_status
    return status in (400, 422) or (status == 500 and err.body is not None)


def recognise(err: BackendError, body: dict[str, Any], quirks: Quirks
              ) -> tuple[str, Change] | None:
    """``(quirk, change)`` when ``err`` is the engine refusing a shape ``body`` had under
    ``quirks`` (module docstring), else None. Pure."""
    if not refused_shape(err):
        return None
    message = err.message
    for name, applies, words, change in _RULES:
        if applies(body, quirks) and words.search(message):
            return name, change
    return None


def _messages(body: dict[str, Any]) -> list[Any]:
    messages = body.get("messages")
    return messages if isinstance(messages, list) else []


def _stream_options(body: dict[str, Any], q: Quirks) -> bool:
    return q.stream_options == "always" and bool(body.get("stream_options")) \
        and not body.get("stream")


def _developer(body: dict[str, Any], q: Quirks) -> bool:
    return q.developer_role and any(isinstance(m, dict) and m.get("role") == "developer"
                                    for m in _messages(body))


def _null_tool_turn(body: dict[str, Any], q: Quirks) -> bool:
    return q.tool_call_content != "empty" and any(
        isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls")
        and not m.get("content") for m in _messages(body))


def _parts(body: dict[str, Any], q: Quirks) -> bool:
    return not q.string_content and any(
        isinstance(m, dict) and isinstance(m.get("content"), list) for m in _messages(body))


def _list_stop(body: dict[str, Any], q: Quirks) -> bool:
    return q.list_stop and isinstance(body.get("stop"), list)


_RULES: tuple[tuple[str, Callable[[dict[str, Any], Quirks], bool], re.Pattern[str], Change],
              ...] = (
    ("stream_options", _stream_options, _STREAM_OPTIONS, {"stream_options": "streamed"}),
    ("developer_role", _developer, _ROLE, {"developer_role": False}),
    ("tool_call_content", _null_tool_turn, _NULL_CONTENT, {"tool_call_content": "empty"}),
    ("string_content", _parts, _PART_CONTENT, {"string_content": True}),
    ("list_stop", _list_stop, _STOP, {"list_stop": False}),
)
"""In order: the first rule whose shape the body had and whose words the refusal has wins."""
