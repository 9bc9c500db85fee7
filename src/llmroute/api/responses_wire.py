"""OpenAI Responses wire models (``POST /v1/responses``) and their translation onto the one
internal request, a Chat Completions body.

The shapes are OpenAI's Responses API (the ``openai`` SDK's ``ResponseCreateParams``); the
mapping onto chat messages follows LiteLLM's Responses→Chat bridge
(``litellm/responses/litellm_completion_transformation/transformation.py``) and vLLM's
own ``/v1/responses`` (``vllm/entrypoints/openai/serving_responses.py``): ``instructions``
become the first system message (never carried over from a previous response, as OpenAI
does); ``input`` a string is one user message; message items keep their role (``developer``
too), ``input_text`` / ``output_text`` parts become text, ``input_image`` an ``image_url``
part; consecutive ``function_call`` items become one assistant message's ``tool_calls``, a
``function_call_output`` a ``tool`` message; ``reasoning`` items are dropped. ``tools`` of
type ``function`` become chat functions; ``tool_choice``, ``max_output_tokens``
(→ ``max_tokens``), ``temperature``, ``top_p``, ``parallel_tool_calls``, ``user`` and
``text.format`` (→ ``response_format``) carry over. Hosted tools (web search, file search,
…), ``background`` and unknown item types are refused with a 400 naming the field, as is a
``function_call_output`` whose ``call_id`` no earlier call in the conversation has.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llmroute.api.wire import validate
from llmroute.errors import InvalidRequest
from llmroute.text import estimate_chat_tokens
from llmroute.types import ChatRequest


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class TextPart(_Wire):
    """``input_text`` / ``output_text`` (and ``text``) content parts."""

    type: Literal["input_text", "output_text", "text", "refusal"]
    text: str | None = None
    refusal: str | None = None


class ImagePart(_Wire):
    """``{"type": "input_image", "image_url": …}`` (a URL or ``data:`` URL)."""

    type: Literal["input_image"]
    image_url: str | None = None
    detail: str | None = None

    @model_validator(mode="after")
    def _url(self) -> ImagePart:
        if not self.image_url:
            raise ValueError("an input_image needs an image_url (file ids are not stored "
                             "by this gateway)")
        return self


Part = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class MessageItem(_Wire):
    """A message: ``role`` and ``content`` (a string or parts)."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]


class FunctionCallItem(_Wire):
    """A call the model made: ``call_id``, ``name``, JSON ``arguments``."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str


class FunctionCallOutputItem(_Wire):
    """The caller's answer to a call: ``call_id`` and its ``output``."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[Part]


class ReasoningItem(_Wire):
    """A reasoning item sent back (dropped on the way to the engine)."""

    type: Literal["reasoning"]


Item = Annotated[MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem,
                 Field(discriminator="type")]


def _item(value: Any) -> Any:
    """A message item may leave out its ``type``: read it as ``message``."""
    if isinstance(value, dict) and "type" not in value and "role" in value:
        return {**value, "type": "message"}
    return value


class FunctionTool(_Wire):
    """``{"type": "function", "name", "description"?, "parameters"?, "strict"?}``; hosted
    tools are refused."""

    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _function_only(cls, data: Any) -> Any:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind != "function":
            raise ValueError(f"tool type {kind!r} is a hosted tool, which this gateway does "
                             "not run; give function tools")
        return data


class ResponsesRequest(_Wire):
    """``POST /v1/responses`` body."""

    model: str = Field(min_length=1)
    input: str | list[Item]
    instructions: str | None = None
    previous_response_id: str | None = Field(None, min_length=1)
    store: bool = True
    stream: bool = False
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    text: dict[str, Any] | None = None
    background: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _items(cls, data: Any) -> Any:
        items = data.get("input") if isinstance(data, dict) else None
        if isinstance(items, list):
            return {**data, "input": [_item(i) for i in items]}
        return data

    @model_validator(mode="after")
    def _served(self) -> ResponsesRequest:
        if self.background:
            raise ValueError("background responses are not offered by this gateway; send "
                             "the request without background, or stream it")
        return self


def validate_responses(body: Any) -> ResponsesRequest:
    """A Responses body validated. Raises InvalidRequest (400) naming the field."""
    wire: ResponsesRequest = validate(ResponsesRequest, body, deepest=True)
    return wire


def to_chat(wire: ResponsesRequest, request_id: str, history: list[dict[str, Any]]
            ) -> tuple[ChatRequest, list[dict[str, Any]]]:
    """``wire`` translated (module docstring) after ``history`` (the chat messages of the
    conversation it continues, without instructions): the chat request, and this turn's
    new chat messages. Raises InvalidRequest (400) naming the field."""
    turn = _turn(wire.input, _calls(history))
    messages = [*history, *turn]
    texts = [_text(m) for m in messages]
    if wire.instructions:
        messages.insert(0, {"role": "system", "content": wire.instructions})
        texts.insert(0, wire.instructions)
    chat: dict[str, Any] = {"model": wire.model, "messages": messages}
    _options(wire, chat)
    return ChatRequest(
        endpoint="chat", body=chat, model=wire.model, stream=wire.stream,
        text="\n".join(texts), prompt_tokens=estimate_chat_tokens(texts),
        max_tokens=wire.max_output_tokens, request_id=request_id, has_tools=bool(wire.tools),
        turns=max(sum(m["role"] == "user" for m in messages), 1)), turn


def _options(wire: ResponsesRequest, chat: dict[str, Any]) -> None:
    """The sampling, tool and format options of ``wire`` onto the chat body."""
    if wire.tools:
        chat["tools"] = [{"type": "function", "function": _function(t)} for t in wire.tools]
    if wire.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(wire.tool_choice)
    for name, value in (("max_tokens", wire.max_output_tokens),
                        ("temperature", wire.temperature), ("top_p", wire.top_p),
                        ("parallel_tool_calls", wire.parallel_tool_calls),
                        ("user", wire.user)):
        if value is not None:
            chat[name] = value
    fmt = (wire.text or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object"):
        chat["response_format"] = _response_format(fmt)
    if wire.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}


def _turn(given: str | list[Any], calls: set[str]) -> list[dict[str, Any]]:
    """This request's ``input`` as chat messages (``calls``: call ids seen so far)."""
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(given):
        if item.type == "message":
            out.append({"role": item.role, "content": _content(item.content)})
        elif item.type == "function_call":
            _add_call(out, item)
            calls.add(item.call_id)
        elif item.type == "function_call_output":
            if item.call_id not in calls:
                raise InvalidRequest(f"input[{i}]: No tool call found for function call "
                                     f"output with call_id {item.call_id}.",
                                     param=f"input[{i}].call_id")
            out.append({"role": "tool", "tool_call_id": item.call_id,
                        "content": _content(item.output, plain=True)})
    return out


def _add_call(out: list[dict[str, Any]], item: FunctionCallItem) -> None:
    """``item`` as a tool call of the last assistant message (a new one unless the last
    message is an assistant's without text after its calls)."""
    call = {"id": item.call_id, "type": "function",
            "function": {"name": item.name, "arguments": item.arguments}}
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _content(content: str | list[Any], plain: bool = False) -> Any:
    """Parts as a chat content: a string when they are text only (or ``plain``)."""
    if isinstance(content, str):
        return content
    if plain or all(p.type != "input_image" for p in content):
        return "".join(p.text or p.refusal or "" for p in content if p.type != "input_image")
    return [{"type": "image_url", "image_url": {"url": p.image_url}} if p.type == "input_image"
            else {"type": "text", "text": p.text or p.refusal or ""} for p in content]


def _calls(history: list[dict[str, Any]]) -> set[str]:
    return {c["id"] for m in history for c in m.get("tool_calls") or ()}


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or () if p.get("type") == "text")


def _function(tool: FunctionTool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name,
                           "parameters": tool.parameters or {"type": "object", "properties": {}}}
    if tool.description is not None:
        out["description"] = tool.description
    if tool.strict is not None:
        out["strict"] = tool.strict
    return out


def _tool_choice(choice: str | dict[str, Any]) -> Any:
    """Responses' ``tool_choice`` → chat's: the same words; a named function nests."""
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    if choice in ("auto", "none", "required"):
        return choice
    raise InvalidRequest(f"tool_choice: {choice!r} is not auto, none, required or a "
                         "function", param="tool_choice")


def _response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
    return {"type": "json_schema", "json_schema": schema}
