"""Context fit: prompt tokens + requested output tokens must fit the backend's context."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend


class ContextFitFilter:
    """Keeps backends with ``prompt_tokens + max_tokens ≤ context_length`` (tokens).

    Without ``max_tokens`` the request needs ``min_output_tokens`` of room (default 16).
    """

    def __init__(self, min_output_tokens: int = 16):
        self._min_output = min_output_tokens

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        need = ctx.request.prompt_tokens + (ctx.request.max_tokens or self._min_output)
        return [b for b in candidates if need <= b.context_length]
