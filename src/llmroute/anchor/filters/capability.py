"""Capability: keep backends that can do what the request needs (tools, logprobs, …)."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.capability import capabilities_of, required
from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend


class CapabilityFilter:
    """Keeps backends whose capabilities include every one the request needs
    (``anchor/capability.py``). When none does, keeps them all (ordered as given): the
    engine may still serve it, and an engine's own 4xx is a clearer answer than a refusal."""

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept."""
        needs = required(ctx.request)
        if not needs:
            return list(candidates)
        able = [b for b in candidates if needs <= capabilities_of(b)]
        return able or list(candidates)
