"""Request bodies as the emulated engine reads them: its own pydantic models, after the
request models of vLLM's OpenAI server, and deliberately not the router's ``api.wire`` (a
parser bug must not hide on both sides of a test).

Unknown fields are tolerated (``extra="allow"``), as vLLM tolerates them; the known ones are
typed strictly (``"5"`` is not a number). Prompt tokens are counted with the router's
estimate (``text``): the emulator has no tokenizer, so router and engine agree on
every prompt's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmroute.errors import InvalidRequest
from llmroute.text import estimate_chat_tokens, estimate_tokens

Endpoint = Literal["chat", "completions"]


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One accepted request, reduced to what the engine serves.

    ``prompt_tokens`` is the estimated prompt size in tokens (≥ 0); ``max_tokens`` the
    output limit asked for (``max_completion_tokens`` first for chat; None when neither is
    given); ``top_n`` None when no logprobs were asked, else the alternatives per token
    (0 allowed); ``include_usage`` asks a streamed answer for a final usage chunk;
    ``text`` the prompt's text (chat: the message contents joined by newlines, as the
    router's ``ChatRequest.text``), whose blocks the prefix cache keys (``blocks.py``).
    """

    endpoint: Endpoint
    request_id: str
    model: str
    stream: bool
    prompt_tokens: int
    max_tokens: int | None
    top_n: int | None
    include_usage: bool
    text: str = ""


def parse_request(endpoint: Endpoint, raw: bytes, request_id: str) -> EngineRequest:
    """Decode and validate the JSON body ``raw`` of a ``POST /v1/chat/completions``
    (``endpoint="chat"``) or ``POST /v1/completions`` request.

    Raises InvalidRequest (code ``invalid_json``, ``invalid_body``,
    ``missing_required_parameter`` or ``invalid_value``; ``param`` names the field).
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_body")
    schema = _ChatBody if endpoint == "chat" else _CompletionBody
    try:
        parsed = schema.model_validate(body)
    except ValidationError as exc:
        raise _rejection(exc) from exc
    return parsed.reduce(request_id)


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


_Positive = Annotated[int, Field(ge=1)]
_TopN = Annotated[int, Field(ge=0, le=20)]


class _UsageOption(_Tolerant):
    include_usage: bool | None = None


class _Part(_Tolerant):
    type: str
    text: str | None = None


class _Turn(_Tolerant):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[_Part] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def plain(self) -> str:
        """The turn's text: its string content, or its text parts one per line."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "\n".join(part.text for part in self.content if part.text)


class _Body(_Tolerant):
    """The fields both endpoints share; the engine serves one choice (``n`` ≤ 1)."""

    model: Annotated[str, Field(min_length=1)]
    stream: bool = False
    stream_options: _UsageOption | None = None
    max_tokens: _Positive | None = None
    n: Annotated[int, Field(ge=1, le=1)] | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None

    def _request(self, endpoint: Endpoint, request_id: str, prompt_tokens: int,
                 max_tokens: int | None, top_n: int | None, text: str) -> EngineRequest:
        usage = self.stream_options is not None and bool(self.stream_options.include_usage)
        return EngineRequest(endpoint, request_id, self.model, self.stream, prompt_tokens,
                             max_tokens, top_n, usage, text)


class _ChatBody(_Body):
    messages: Annotated[list[_Turn], Field(min_length=1)]
    max_completion_tokens: _Positive | None = None
    logprobs: bool | None = None
    top_logprobs: _TopN | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None

    def reduce(self, request_id: str) -> EngineRequest:
        """The EngineRequest of this chat body."""
        top_n = (self.top_logprobs or 0) if self.logprobs else None
        texts = [turn.plain() for turn in self.messages]
        return self._request("chat", request_id, estimate_chat_tokens(texts),
                             self.max_completion_tokens or self.max_tokens, top_n,
                             "\n".join(texts))


class _CompletionBody(_Body):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: _TopN | None = None
    echo: bool | None = None

    def reduce(self, request_id: str) -> EngineRequest:
        """The EngineRequest of this completions body."""
        prompt = self.prompt
        text = prompt if isinstance(prompt, str) else "\n".join(
            p for p in prompt if isinstance(p, str))
        return self._request("completions", request_id, _prompt_size(prompt),
                             self.max_tokens, self.logprobs, text)


def _prompt_size(prompt: str | list[str] | list[int] | list[list[int]]) -> int:
    """Estimated tokens of a text prompt (a list of texts: joined by newlines); a prompt
    of token ids (or of texts that are all empty) counts one token per item."""
    if isinstance(prompt, str):
        return estimate_tokens(prompt)
    text = "\n".join(item for item in prompt if isinstance(item, str))
    if text:
        return estimate_tokens(text)
    return sum(len(item) if isinstance(item, list) else 1 for item in prompt)


def _rejection(exc: ValidationError) -> InvalidRequest:
    """The first validation error as an InvalidRequest: ``param`` is the top-level field,
    the message carries pydantic's whole location (e.g. ``messages.0.role``)."""
    first = exc.errors(include_url=False)[0]
    loc = first["loc"]
    where = ".".join(str(part) for part in loc)
    code = "missing_required_parameter" if first["type"] == "missing" else "invalid_value"
    param = str(loc[0]) if loc else None
    return InvalidRequest(f"{where}: {first['msg']}" if where else first["msg"],
                          param=param, code=code)
