"""What a backend can do (``tools``, ``logprobs``, ``continuation``) and what a request needs.

Defaults by engine kind, overridable per backend in config (``capabilities: [...]``):
``tools`` for every kind; ``logprobs`` and ``continuation`` (a native way to continue a
trailing assistant message) as the engine table in ``backends/capabilities.py`` says —
vLLM, SGLang, the emulator and llama.cpp yes; Ollama and hosted OpenAI-compatible APIs no.
"""

from __future__ import annotations

from llmroute.backends.capabilities import ContinuationForm, capabilities
from llmroute.types import Backend, ChatRequest


def engine_defaults(engine: str) -> frozenset[str]:
    """The capabilities an engine kind has unless configured otherwise."""
    row = capabilities(engine)
    names = {"tools"}
    if row.logprobs:
        names.add("logprobs")
    if row.continuation is not ContinuationForm.GENERIC:
        names.add("continuation")
    return frozenset(names)


def capabilities_of(backend: Backend) -> frozenset[str]:
    """The backend's configured capabilities, else its engine kind's defaults."""
    if backend.capabilities is not None:
        return backend.capabilities
    return engine_defaults(backend.engine)


def required(request: ChatRequest) -> frozenset[str]:
    """What ``request`` needs: ``tools`` (a tools list), ``logprobs`` (``logprobs`` true or
    ``top_logprobs`` set; legacy completions: ``logprobs`` a number), ``continuation`` (a
    chat whose last message is the assistant's, to be continued)."""
    body = request.body
    needs = set()
    if request.has_tools:
        needs.add("tools")
    if body.get("logprobs") or body.get("top_logprobs"):
        needs.add("logprobs")
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict) \
            and messages[-1].get("role") == "assistant":
        needs.add("continuation")
    return frozenset(needs)
