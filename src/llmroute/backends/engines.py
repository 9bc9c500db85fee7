"""The engine-kind table: per kind, what it can do and where its load signals are.

Config validation (known kinds, which can be launched locally), the anchor's capability
filter, the fuse's handoff (how to ask for a continuation) and the anchor's collector (which
metrics endpoint to poll, parsed by the anchor's parser for ``format``) all read this one
table. An unknown kind gets the generic row: no logprobs, the generic continuation, no
metrics.

| engine | logprobs | continuation form | echoes the prefix | metrics format: paths | tokenize |
|---|---|---|---|---|---|
| ``vllm`` | yes | ``continue_final_message`` | no | ``vllm``: ``/metrics`` | ``openai`` |
| ``emulator`` | yes | ``continue_final_message`` | no | ``vllm``: ``/metrics`` | none |
| ``sglang`` | yes | ``continue_final_message`` | no | ``sglang``: ``/metrics`` | ``openai`` |
| ``llamacpp`` | yes | trailing assistant message (assistant prefill) | **yes** | ``llamacpp``: ``/metrics``, ``/slots`` | ``llamacpp`` |
| ``ollama`` | no | generic: assistant prefix + a user "continue" instruction | no | ``ollama``: ``/api/ps`` | none |
| ``openai`` | no | generic | no | none (hosted) | none |

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

Capability = Literal["tools", "logprobs", "continuation"]
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
    ``logprobs_with_tools`` (it accepts ``logprobs`` on a streamed request with ``tools``)."""

    logprobs: bool
    continuation: ContinuationForm
    echoes_prefix: bool = False
    logprobs_with_tools: bool = True


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
    defaults: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        caps = self.capabilities
        names = {"tools"} | ({"logprobs"} if caps.logprobs else set())
        if caps.continuation is not ContinuationForm.GENERIC:
            names.add("continuation")
        object.__setattr__(self, "defaults", frozenset(names))


_CONTINUE = Capabilities(True, ContinuationForm.CONTINUE_FINAL_MESSAGE)
_GENERIC = Capabilities(False, ContinuationForm.GENERIC)
_OPENAI_TOKENIZE = TokenizeEndpoint("openai")

ENGINES: Mapping[str, EngineKind] = MappingProxyType({
    "vllm": EngineKind(_CONTINUE, MetricsEndpoint("vllm"), tokenize=_OPENAI_TOKENIZE),
    "sglang": EngineKind(_CONTINUE, MetricsEndpoint("sglang"), tokenize=_OPENAI_TOKENIZE),
    "llamacpp": EngineKind(
        Capabilities(True, ContinuationForm.ASSISTANT_PREFILL, echoes_prefix=True,
                     logprobs_with_tools=False),
        MetricsEndpoint("llamacpp", ("/metrics", "/slots")), launch=True,
        tokenize=TokenizeEndpoint("llamacpp", template_path="/apply-template")),
    "ollama": EngineKind(_GENERIC, MetricsEndpoint("ollama", ("/api/ps",))),
    "openai": EngineKind(_GENERIC),
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
