"""Capability: keep backends that can do what the request needs (tools, logprobs, …).

A backend's capabilities are configured (``capabilities: [...]``) or its engine kind's
defaults (``backends/engines.py``): ``tools`` for every kind; ``logprobs`` and
``continuation`` (a native way to continue a trailing assistant message) for vLLM, SGLang,
the emulator and llama.cpp, not for Ollama and hosted OpenAI-compatible APIs.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.backends.engines import capabilities_of
from llmroute.types import Backend, ChatRequest


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


class CapabilityFilter:
    """Keeps backends whose capabilities include every one the request needs
    (``required``). When none does, keeps them all (ordered as given): the engine may still
    serve it, and an engine's own 4xx is a clearer answer than a refusal."""

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept."""
        needs = required(ctx.request)
        if not needs:
            return list(candidates)
        able = [b for b in candidates if needs <= capabilities_of(b)]
        return able or list(candidates)
