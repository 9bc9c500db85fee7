"""Anthropic Messages wire models (``POST /v1/messages``, ``/v1/messages/count_tokens``) and
their translation onto the one internal request, a Chat Completions body.

The shapes are Anthropic's Messages API (the ``anthropic`` SDK's ``MessageCreateParams``);
the mapping onto chat messages follows LiteLLM's Anthropic adapter
(``litellm/llms/anthropic/experimental_pass_through/adapters/transformation.py``) and
vLLM's own ``/v1/messages`` (``vllm/entrypoints/anthropic/serving.py``): ``system`` becomes
the first system message; a user turn's ``tool_result`` blocks become ``tool`` messages
(before the turn's other blocks); an assistant turn's ``tool_use`` blocks become its
``tool_calls`` (``input`` as JSON ``arguments``); ``image`` blocks become ``image_url``
parts (base64 as a ``data:`` URL); ``thinking`` blocks sent back are dropped (engines take
no signed thinking); ``tools`` become functions (``input_schema`` as ``parameters``);
``tool_choice`` ``auto``/``any``/``tool``/``none`` become ``auto``/``required``/the named
function/``none`` (``disable_parallel_tool_use`` → ``parallel_tool_calls: false``);
``stop_sequences`` → ``stop``, ``metadata.user_id`` → ``user``. ``thinking`` is accepted:
an engine that reasons streams its ``reasoning_content``, answered as ``thinking`` blocks
(``api/anthropic_out.py``); one that does not answers none, as Anthropic allows.
Unknown block types, server tools and a ``tool_result`` whose ``tool_use`` is not in the
assistant turn before it are refused with a 400 naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from llmroute.api.wire import validate
from llmroute.errors import InvalidRequest
from llmroute.text import estimate_chat_tokens
from llmroute.types import ChatRequest


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class TextBlock(_Wire):
    """``{"type": "text", "text": …}`` (``cache_control``, ``citations`` ignored)."""

    type: Literal["text"]
    text: str


class ImageSource(_Wire):
    """An image's ``source``: ``base64`` (``media_type`` and ``data``) or ``url``."""

    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> ImageSource:
        if self.type == "base64" and (not self.media_type or not self.data):
            raise ValueError("a base64 image source needs media_type and data")
        if self.type == "url" and not self.url:
            raise ValueError("a url image source needs a url")
        return self


class ImageBlock(_Wire):
    """``{"type": "image", "source": …}``."""

    type: Literal["image"]
    source: ImageSource


class ToolUseBlock(_Wire):
    """An assistant's call: ``{"type": "tool_use", "id", "name", "input": {…}}``."""

    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


_ResultPart = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultBlock(_Wire):
    """A user's answer to a call: ``{"type": "tool_result", "tool_use_id", "content"}``
    (``content`` a string or text blocks)."""

    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[_ResultPart] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Wire):
    """A thinking block sent back in an assistant turn (dropped on the way to the engine)."""

    type: Literal["thinking"]
    thinking: str


class RedactedThinkingBlock(_Wire):
    """A redacted thinking block sent back (dropped on the way to the engine)."""

    type: Literal["redacted_thinking"]


Block = Annotated[TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock
                  | RedactedThinkingBlock, Field(discriminator="type")]


class Message(_Wire):
    """One turn: ``role`` ``user`` or ``assistant``, ``content`` a string or blocks."""

    role: Literal["user", "assistant"]
    content: str | list[Block]


class Tool(_Wire):
    """A client tool: ``name``, ``description``, ``input_schema`` (a JSON Schema object).
    Server tools (a ``type`` other than ``custom``) run at Anthropic, not here: refused."""

    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _client_tool(cls, data: Any) -> Any:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind not in (None, "custom"):
            raise ValueError(f"{kind!r} is a server tool, which this gateway does not run; "
                             "give client tools (name, input_schema)")
        return data


class ToolChoice(_Wire):
    """``{"type": "auto" | "any" | "tool" | "none", "name"?, "disable_parallel_tool_use"?}``."""

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice of type 'tool' needs the tool's name")
        return self


class Thinking(_Wire):
    """``{"type": "enabled", "budget_tokens": n}``, ``{"type": "adaptive"}`` or
    ``{"type": "disabled"}`` (module docstring: how it is served)."""

    type: Literal["enabled", "adaptive", "disabled"]
    budget_tokens: int | None = Field(None, ge=1)


class Metadata(_Wire):
    """``metadata.user_id``: passed to the engine as ``user``."""

    user_id: str | None = None


class CountTokensRequest(_Wire):
    """``POST /v1/messages/count_tokens`` body: a Messages request without its output
    settings."""

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None


class MessagesRequest(CountTokensRequest):
    """``POST /v1/messages`` body (``max_tokens`` required, as Anthropic's)."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    metadata: Metadata | None = None


def parse_messages(body: Any, request_id: str) -> tuple[MessagesRequest, ChatRequest]:
    """Validate a Messages body and translate it (module docstring). Raises
    InvalidRequest (400) naming the field."""
    wire: MessagesRequest = validate(MessagesRequest, body, deepest=True)
    chat, texts, turns = _chat_body(wire)
    chat["max_tokens"] = wire.max_tokens
    for name, value in (("stop", wire.stop_sequences), ("temperature", wire.temperature),
                        ("top_p", wire.top_p), ("top_k", wire.top_k)):
        if value is not None:
            chat[name] = value
    if wire.metadata is not None and wire.metadata.user_id is not None:
        chat["user"] = wire.metadata.user_id
    if wire.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return wire, ChatRequest(
        endpoint="chat", body=chat, model=wire.model, stream=wire.stream,
        text="\n".join(texts), prompt_tokens=estimate_chat_tokens(texts),
        max_tokens=wire.max_tokens, request_id=request_id, has_tools=bool(wire.tools),
        turns=max(turns, 1))


def parse_count(body: Any, request_id: str) -> ChatRequest:
    """A count_tokens body as the chat request whose prompt is counted. Raises
    InvalidRequest (400) naming the field."""
    wire: CountTokensRequest = validate(CountTokensRequest, body, deepest=True)
    chat, texts, _ = _chat_body(wire)
    return ChatRequest(endpoint="chat", body=chat, model=wire.model, stream=False,
                       text="\n".join(texts), prompt_tokens=estimate_chat_tokens(texts),
                       max_tokens=None, request_id=request_id, has_tools=bool(wire.tools))


def _chat_body(wire: CountTokensRequest) -> tuple[dict[str, Any], list[str], int]:
    """The chat body's model, messages and tools, the prompt texts, the user turns."""
    messages: list[dict[str, Any]] = []
    texts: list[str] = []
    system = wire.system
    if system:
        text = system if isinstance(system, str) else "\n".join(b.text for b in system)
        messages.append({"role": "system", "content": text})
        texts.append(text)
    calls: frozenset[str] = frozenset()
    for i, m in enumerate(wire.messages):
        if isinstance(m.content, str):
            messages.append({"role": m.role, "content": m.content})
            texts.append(m.content)
            calls = frozenset()
        elif m.role == "assistant":
            calls = _assistant(m.content, messages, texts)
        else:
            _user(i, m.content, calls, messages, texts)
            calls = frozenset()
    chat: dict[str, Any] = {"model": wire.model, "messages": messages}
    if wire.tools:
        chat["tools"] = [{"type": "function", "function": _function(t)} for t in wire.tools]
    if wire.tool_choice is not None:
        _tool_choice(wire.tool_choice, chat)
    return chat, texts, sum(m["role"] == "user" for m in messages)


def _assistant(blocks: list[Any], out: list[dict[str, Any]], texts: list[str]
               ) -> frozenset[str]:
    """An assistant turn as one chat message; returns the ids of its tool calls."""
    text = "".join(b.text for b in blocks if b.type == "text")
    calls = [{"id": b.id, "type": "function", "function": {
        "name": b.name, "arguments": orjson.dumps(b.input).decode()}}
        for b in blocks if b.type == "tool_use"]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    out.append(message)
    texts.append(text)
    return frozenset(c["id"] for c in calls)


def _user(i: int, blocks: list[Any], calls: frozenset[str], out: list[dict[str, Any]],
          texts: list[str]) -> None:
    """A user turn: its tool results as ``tool`` messages, then its other blocks as one
    user message. Raises InvalidRequest for a result whose call the turn before lacks."""
    parts: list[dict[str, Any]] = []
    for j, b in enumerate(blocks):
        if b.type == "tool_result":
            if b.tool_use_id not in calls:
                raise InvalidRequest(
                    f"messages[{i}].content[{j}]: tool_result block(s) provided without a "
                    f"tool_use block with id {b.tool_use_id!r} in the previous message",
                    param=f"messages[{i}].content[{j}].tool_use_id")
            content = _result_text(i, j, b.content)
            out.append({"role": "tool", "tool_call_id": b.tool_use_id, "content": content})
            texts.append(content)
        elif b.type == "text":
            parts.append({"type": "text", "text": b.text})
            texts.append(b.text)
        elif b.type == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(b.source)}})
        else:
            raise InvalidRequest(f"messages[{i}].content[{j}]: a {b.type} block may only "
                                 "appear in an assistant turn",
                                 param=f"messages[{i}].content[{j}].type")
    if parts:
        only_text = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": "user", "content": parts[0]["text"] if only_text else parts})


def _result_text(i: int, j: int, content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if any(p.type != "text" for p in content):
        raise InvalidRequest(f"messages[{i}].content[{j}].content: images inside a "
                             "tool_result are not supported by the engines behind this "
                             "gateway", param=f"messages[{i}].content[{j}].content")
    return "\n".join(p.text for p in content)


def _image_url(source: ImageSource) -> str:
    if source.type == "url":
        return source.url or ""
    return f"data:{source.media_type};base64,{source.data}"


def _function(tool: Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        out["description"] = tool.description
    return out


def _tool_choice(choice: ToolChoice, chat: dict[str, Any]) -> None:
    if choice.type == "tool":
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    else:
        chat["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
    if choice.disable_parallel_tool_use:
        chat["parallel_tool_calls"] = False
