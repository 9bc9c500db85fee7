"""OpenAI wire models (pydantic, strict types) and their conversion to ``ChatRequest``.

Unknown fields are kept (``extra="allow"``) and passed through to the engine unchanged.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llmroute.errors import InvalidRequest
from llmroute.text import estimate_chat_tokens, estimate_tokens
from llmroute.types import ChatRequest


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ContentPart(_Open):
    """One part of a message's content: ``{"type": "text", "text": …}`` (``text`` required)
    or an image etc."""

    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _text_has_text(self) -> ContentPart:
        if self.type == "text" and self.text is None:
            raise ValueError("a text content part needs a 'text' string")
        return self


class FunctionCall(_Open):
    """``tool_calls[i].function``: the called function's ``name`` and JSON ``arguments``."""

    name: str = Field(min_length=1)
    arguments: str


class ToolCall(_Open):
    """One ``tool_calls`` entry of an assistant message (OpenAI: ``type`` is ``function``)."""

    id: str
    type: str
    function: FunctionCall


class FunctionDef(_Open):
    """``tools[i].function``: a callable function's ``name`` (its schema passes through)."""

    name: str = Field(min_length=1)


class Tool(_Open):
    """One ``tools`` entry: ``{"type": "function", "function": {"name": …, …}}``."""

    type: str
    function: FunctionDef


class Message(_Open):
    """A chat message; ``content`` is a string, a list of parts, or None (tool-call turns)."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text parts joined by newlines (images etc. contribute nothing)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content or () if p.text)


class StreamOptions(_Open):
    """``stream_options``: ``include_usage`` adds a final usage chunk."""

    include_usage: bool | None = None


class _Sampling(_Open):
    model: str = Field(min_length=1)
    stream: bool = False
    max_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    stream_options: StreamOptions | None = None

    @field_validator("n")
    @classmethod
    def _unstreamed_choices(cls, v: int | None, info: ValidationInfo) -> int | None:
        """n > 1 is served without streaming only (one stream carries one answer; the
        backends that can answer n choices are picked in ``dispatch/serve.py``)."""
        if v is not None and v > 1 and info.data.get("stream"):
            raise ValueError("n > 1 is not supported with stream: true; send it without "
                             "streaming, or n separate streamed requests")
        return v

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions`` body."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None


class CompletionRequest(_Sampling):
    """``POST /v1/completions`` body (legacy completions)."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool | None = None


def parse_chat(body: Any, request_id: str) -> ChatRequest:
    """Validate a chat body into a ChatRequest. Raises InvalidRequest naming the field."""
    wire = validate(ChatCompletionRequest, body)
    texts: list[str] = []
    user_turns = images = 0
    for m in wire.messages:
        content = m.content
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.append(m.text())
            images += sum(p.type != "text" for p in content or ())
        user_turns += m.role == "user"
    return ChatRequest(
        endpoint="chat", body=body, model=wire.model, stream=wire.stream,
        text="\n".join(texts), prompt_tokens=estimate_chat_tokens(texts),
        max_tokens=wire.max_completion_tokens or wire.max_tokens, request_id=request_id,
        has_tools=bool(wire.tools), turns=max(user_turns, 1), images=images)


def parse_completion(body: Any, request_id: str) -> ChatRequest:
    """Validate a legacy completions body. Raises InvalidRequest naming the field."""
    wire = validate(CompletionRequest, body)
    text = _prompt_text(wire.prompt)
    return ChatRequest(
        endpoint="completions", body=body, model=wire.model, stream=wire.stream, text=text,
        prompt_tokens=estimate_tokens(text) if text else _token_count(wire.prompt),
        max_tokens=wire.max_tokens, request_id=request_id)


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(p for p in prompt if isinstance(p, str))


def _token_count(prompt: Any) -> int:
    return sum(len(p) if isinstance(p, list) else 1 for p in prompt)


def validate(model: type[BaseModel], body: Any, deepest: bool = False) -> Any:
    """``body`` validated by ``model`` (its validator itself). Raises InvalidRequest (400)
    for a body that is not a JSON object, or naming the first invalid field (``param``
    OpenAI-style, e.g. ``messages[0].content``); ``deepest``: the error deepest in the body
    instead (inside the union member a value matched: an unknown block ``type`` in a list,
    not "expected a string")."""
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_body")
    try:  # the model's validator itself: what model_validate calls, minus its wrapper
        return model.__pydantic_validator__.validate_python(body)
    except ValidationError as exc:
        errors = exc.errors()
        if deepest:
            errors = [max(errors, key=lambda e: len(e["loc"]))]
        param = _param(errors[0]["loc"])
        raise InvalidRequest(_message(param, errors), param=param or None,
                             code=_code(errors[0]["type"])) from exc


def _message(param: str, errors: list[Any]) -> str:
    """The first error; for a union (several errors at one field) name the accepted types."""
    same = [e for e in errors if _param(e["loc"]) == param]
    if len(same) > 1:
        # a member's tag without pydantic's validator names: ``list[function-after[…]]`` → list
        kinds = ", ".join(dict.fromkeys(str(e["loc"][-1]).split("[", 1)[0] for e in same))
        return f"{param}: invalid type (expected one of: {kinds})"
    return f"{param}: {errors[0]['msg']}" if param else errors[0]["msg"]


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _param(loc: tuple[Any, ...]) -> str:
    """pydantic loc → OpenAI-style param, e.g. ``messages[0].content``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or part.startswith("function-") or part in _TYPE_TAGS:
            continue
        else:
            out += f".{part}" if out else part
    return out


def _code(error_type: str) -> str:
    return "missing_required_parameter" if error_type == "missing" else "invalid_value"


class EmbeddingRequest(_Open):
    """``POST /v1/embeddings`` body: ``input`` is a string, a list of strings, a list of
    token ids or a list of token-id lists (OpenAI: at most 2048 inputs, none empty)."""

    model: str = Field(min_length=1)
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None

    @field_validator("input")
    @classmethod
    def _inputs(cls, v: Any) -> Any:
        items = [v] if isinstance(v, str) else v
        if not items or len(items) > 2048:
            raise ValueError("give 1 to 2048 inputs")
        if any(not x for x in items if isinstance(x, str | list)):
            raise ValueError("an input must not be empty")
        return v


def parse_embeddings(body: Any, request_id: str) -> ChatRequest:
    """Validate an embeddings body. Raises InvalidRequest naming the field."""
    wire = validate(EmbeddingRequest, body)
    text = _prompt_text(wire.input)
    return ChatRequest(
        endpoint="embeddings", body=body, model=wire.model, stream=False, text=text,
        prompt_tokens=estimate_tokens(text) if text else _token_count(wire.input),
        max_tokens=0, request_id=request_id)

