"""The engine-kind table: per kind, what it can do and where its load signals are.

Config validation (known kinds, which can be launched locally), the anchor's capability
filter, the fuse's handoff (how to ask for a continuation) and the anchor's collector (which
metrics endpoint to poll, parsed by the anchor's parser for ``format``) all read this one
table. An unknown kind gets the generic row: no logprobs, the generic continuation, no
metrics.

| engine | logprobs | continuation form | echoes the prefix | ``n`` > 1 | metrics format: paths | tokenize |
|---|---|---|---|---|---|---|
| ``vllm`` | yes | ``continue_final_message`` | no | yes | ``vllm``: ``/metrics`` | ``openai`` |
| ``emulator`` | yes | ``continue_final_message`` | no | no | ``vllm``: ``/metrics`` | none |
| ``sglang`` | yes | ``continue_final_message`` | no | yes | ``sglang``: ``/metrics`` | ``openai`` |
| ``llamacpp`` | yes | trailing assistant message (assistant prefill) | **yes** | no | ``llamacpp``: ``/metrics``, ``/slots`` | ``llamacpp`` |
| ``ollama`` | no | generic: assistant prefix + a user "continue" instruction | no | no | ``ollama``: ``/api/ps`` | none |
| ``openai`` | no | generic | no | no | none (hosted) | none |

Request-body quirks (``Quirks``, shaped by ``backends/quirks.py``; a backend's ``quirks:`` in
config overrides any field, and ``dispatch/adapt.py`` adds one learned from the engine's own
refusal). Each kind's row was checked against its engine's request parsing:

| engine | quirks (every other field: as the client sent it) |
|---|---|
| ``vllm`` | ``stream_options: streamed`` |
| ``sglang`` | none |
| ``llamacpp`` | ``budget_field: max_tokens``, ``developer_role: false`` |
| ``ollama`` | ``budget_field: max_tokens``, ``developer_role: false``, ``tool_choice_object: false``, |
|  | ``tool_call_content: empty`` |
| ``openai`` | ``stream_options: streamed`` |
| ``emulator`` | none (``emulator/request.py`` takes every field below) |

Where each was learned:

* vLLM, ``vllm/entrypoints/openai/chat_completion/protocol.py`` @ 002032ee:
  ``ChatCompletionRequest.validate_stream_options`` refuses ``stream_options`` without
  ``stream: true`` (400 "Stream options can only be defined when `stream=True`."); the same
  model takes ``developer`` messages, a list ``stop`` (``StopParam``), ``content: null``
  beside ``tool_calls`` and text parts, and reads ``max_completion_tokens or max_tokens``.
* SGLang, ``python/sglang/srt/entrypoints/openai/protocol.py`` @ 004c82e0: the roles include
  ``developer``, ``stop: str | List[str]``, ``content: str | parts | None``, no validator on
  ``stream_options``, ``max_new_tokens = max_completion_tokens or max_tokens``.
* llama.cpp, probed on ``llama-server`` (llama-cpp-python 0.3.36's llama.cpp 0.5.0-dev): it
  obeys ``max_completion_tokens`` over a smaller ``max_tokens`` (so the smaller is sent
  alone); it renders ``developer`` as ``system`` itself (``/apply-template``; older builds
  handed the role to the model's template, hence ``system``); it takes a list ``stop``,
  ``stream_options`` on a non-streamed call, ``content: null`` beside ``tool_calls`` and
  text parts; it refuses ``n`` > 1 (the ``n`` capability) and ``logprobs`` beside ``tools``
  on a stream (``fuse/arming.py``).
* Ollama, ``openai/openai.go`` @ fb307609: ``ChatCompletionRequest`` (lines 105-123) has
  ``max_tokens`` only and no ``tool_choice``; its model templates know ``system``, ``user``,
  ``assistant`` and ``tool``. ``FromChatRequest`` answers a ``content`` that is neither a
  string nor a list with 400 "invalid message content type: <nil>" (line 630), which
  users of Ollama 0.13+ meet on assistant tool-call turns sent with ``content: null``
  (pydantic/pydantic-ai#5206); a string ``content`` is taken by every version
  (``case string``) and keeps the turn's tool calls since v0.11.4 (203c1378).
* OpenAI refuses ``stream_options`` unless ``stream`` is true (API reference: "Only set this
  when you set `stream: true`"; 400 "The 'stream_options' parameter is only allowed when
  'stream' is enabled.").

The tokenize column is the engine's own prompt-counting endpoint (``policy/tokenizers.py``):
``openai`` is vLLM's and SGLang's ``POST /tokenize`` with ``{"model", "messages"}`` (chat; the
chat template applied) or ``{"model", "prompt"}`` → ``{"count", "tokens", …}``;
``llamacpp`` is llama-server's ``POST /apply-template`` ``{"messages"}`` → ``{"prompt"}``
(chat only) then ``POST /tokenize`` ``{"content", "add_special": true}`` → ``{"tokens": […]}``.
Ollama has no tokenize endpoint, hosted APIs none that is OpenAI-compatible, and the emulator
counts with the router's own estimate.

``continue_final_message`` means ``continue_final_message: true`` + ``add_generation_prompt:
false``, vLLM's and SGLang's documented chat-completions extra parameters. The llama.cpp row
was learned from the real ``llama-server`` (the build from the ``llama-cpp-python`` 0.3.36
sdist): streamed, its first content delta is the prefix followed by the first new token; its
``logprobs`` cover only the new tokens; it refuses ``logprobs`` on a streamed request with
``tools`` (400 "logprobs is not supported with tools + stream"); its ``/slots`` is optional
(404 without ``--slots``). Hosted OpenAI-compatible APIs and Ollama's OpenAI endpoint neither
promise logprobs nor continue a trailing assistant message, so they get the generic form
(see ``fuse/handoff.py``) and no entropy trigger. Only ``llamacpp`` can be launched by
llmroute itself (``local/``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from llmroute.types import Backend

Capability = Literal["tools", "logprobs", "continuation", "n"]
"""What a backend can do, as config names it (``capabilities: [...]``)."""


class ContinuationForm(enum.Enum):
    """How a request asks an engine to continue an assistant message."""

    CONTINUE_FINAL_MESSAGE = "continue_final_message"
    ASSISTANT_PREFILL = "assistant_prefill"
    GENERIC = "generic"


@dataclass(frozen=True, slots=True)
class Capabilities:
    """One engine kind: ``logprobs`` (streams per-token ``top_logprobs``), the
    ``continuation`` form, ``echoes_prefix`` (its answer repeats the assistant prefix) and
    ``logprobs_with_tools`` (it accepts ``logprobs`` on a streamed request with ``tools``)
    and ``n`` (it answers ``n`` > 1 choices in one request)."""

    logprobs: bool
    continuation: ContinuationForm
    echoes_prefix: bool = False
    logprobs_with_tools: bool = True
    n: bool = False


@dataclass(frozen=True, slots=True)
class Quirks:
    """What an engine kind accepts in a request body (``backends/quirks.py`` shapes the
    body to it; every default means "as the client sent it"):

    ``developer_role``: takes ``developer`` messages (False: sent as ``system``);
    ``budget_field``: the one output-budget field it reads (``max_tokens`` or
    ``max_completion_tokens``; the smaller of the two is sent there), None: both as sent;
    ``tool_call_content``: an assistant tool-call turn without text carries ``content``
    ``null``, ``empty`` (``""``) or ``absent``, None: as sent; ``string_content``: only string
    ``content`` (text parts flattened); ``list_stop``: takes a list ``stop`` (False: its first
    item); ``stream_options``: ``always`` taken, ``streamed`` only on a streamed call;
    ``tool_choice_object``: takes a named-function ``tool_choice`` (False: ``"required"`` with
    only that tool); ``drop``: top-level fields it rejects, never sent."""

    developer_role: bool = True
    budget_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    tool_call_content: Literal["null", "empty", "absent"] | None = None
    string_content: bool = False
    list_stop: bool = True
    stream_options: Literal["always", "streamed"] = "always"
    tool_choice_object: bool = True
    drop: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class MetricsEndpoint:
    """Where an engine kind's load signals are: ``format`` names the parser (the anchor
    looks it up in ``anchor/sources/http.py``), ``paths`` are under the backend's base URL
    (the first required; any further one optional)."""

    format: str
    paths: tuple[str, ...] = ("/metrics",)


@dataclass(frozen=True, slots=True)
class TokenizeEndpoint:
    """How an engine kind counts a prompt with its own tokenizer: ``shape`` names the
    request/answer form (``openai``: vLLM/SGLang, ``llamacpp``: llama-server; see the table),
    ``path`` is under the backend's base URL, ``template_path`` (``llamacpp`` only) renders a
    chat's messages into the prompt first."""

    shape: Literal["openai", "llamacpp"]
    path: str = "/tokenize"
    template_path: str | None = None


@dataclass(frozen=True, slots=True)
class EngineKind:
    """One row of the table: ``capabilities``, the ``metrics`` endpoint (None: nothing to
    poll), whether llmroute can ``launch`` it locally, its ``tokenize`` endpoint (None:
    none), and ``defaults``: the capability names
    a backend of this kind has unless configured (``tools`` always; ``logprobs`` and
    ``continuation`` — a native way to continue a trailing assistant message — as
    ``capabilities`` says)."""

    capabilities: Capabilities
    metrics: MetricsEndpoint | None = None
    launch: bool = False
    tokenize: TokenizeEndpoint | None = None
    quirks: Quirks = Quirks()
    defaults: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        caps = self.capabilities
        names = {"tools"} | ({"logprobs"} if caps.logprobs else set())
        if caps.n:
            names.add("n")
        if caps.continuation is not ContinuationForm.GENERIC:
            names.add("continuation")
        object.__setattr__(self, "defaults", frozenset(names))


_CONTINUE = Capabilities(True, ContinuationForm.CONTINUE_FINAL_MESSAGE)
_CONTINUE_N = Capabilities(True, ContinuationForm.CONTINUE_FINAL_MESSAGE, n=True)
_GENERIC = Capabilities(False, ContinuationForm.GENERIC)
_OPENAI_TOKENIZE = TokenizeEndpoint("openai")

ENGINES: Mapping[str, EngineKind] = MappingProxyType({
    "vllm": EngineKind(_CONTINUE_N, MetricsEndpoint("vllm"), tokenize=_OPENAI_TOKENIZE,
                       quirks=Quirks(stream_options="streamed")),
    "sglang": EngineKind(_CONTINUE_N, MetricsEndpoint("sglang"), tokenize=_OPENAI_TOKENIZE),
    "llamacpp": EngineKind(
        Capabilities(True, ContinuationForm.ASSISTANT_PREFILL, echoes_prefix=True,
                     logprobs_with_tools=False),
        MetricsEndpoint("llamacpp", ("/metrics", "/slots")), launch=True,
        tokenize=TokenizeEndpoint("llamacpp", template_path="/apply-template"),
        quirks=Quirks(developer_role=False, budget_field="max_tokens")),
    "ollama": EngineKind(_GENERIC, MetricsEndpoint("ollama", ("/api/ps",)),
                         quirks=Quirks(developer_role=False, budget_field="max_tokens",
                                       tool_choice_object=False, tool_call_content="empty")),
    "openai": EngineKind(_GENERIC, quirks=Quirks(stream_options="streamed")),
    "emulator": EngineKind(_CONTINUE, MetricsEndpoint("vllm")),
})
"""Every engine kind by name (the names config accepts for ``engine``)."""

_UNKNOWN = EngineKind(_GENERIC)


def engine_kind(engine: str) -> EngineKind:
    """The row of engine kind ``engine`` (an unknown kind gets the generic row)."""
    return ENGINES.get(engine, _UNKNOWN)


def capabilities(engine: str) -> Capabilities:
    """The capabilities of engine kind ``engine`` (an unknown kind gets the generic row)."""
    return engine_kind(engine).capabilities


def capabilities_of(backend: Backend) -> frozenset[str]:
    """The backend's configured capabilities, else its engine kind's ``defaults``."""
    if backend.capabilities is not None:
        return backend.capabilities
    return engine_kind(backend.engine).defaults


def backend_capabilities(backend: Backend) -> Capabilities:
    """The engine kind's capabilities as this backend is configured: without ``logprobs``
    configured none are asked for; without ``continuation`` it gets the generic
    continuation form (and so echoes nothing); with ``continuation`` configured on a kind
    whose form is generic, the assistant prefill (a trailing assistant message)."""
    caps = capabilities(backend.engine)
    if backend.capabilities is None:
        return caps
    able = backend.capabilities
    form = caps.continuation
    if "continuation" not in able:
        form = ContinuationForm.GENERIC
    elif form is ContinuationForm.GENERIC:
        form = ContinuationForm.ASSISTANT_PREFILL
    return Capabilities(caps.logprobs and "logprobs" in able, form,
                        caps.echoes_prefix and form is not ContinuationForm.GENERIC,
                        caps.logprobs_with_tools, caps.n and "n" in able)
