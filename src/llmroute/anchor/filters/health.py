"""Health: drop backends whose circuit breaker does not allow a request now."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.types import Backend


class HealthFilter:
    """Keeps backends the breaker allows at ``ctx.now``. If the breaker would drop every
    candidate, keeps them all (ordered as given) so the request still gets an attempt."""

    def __init__(self, breaker: CircuitBreaker):
        self._breaker = breaker

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        allow, now = self._breaker.allow, ctx.now
        allowed = [b for b in candidates if allow(b.id, now)]
        return allowed or list(candidates)
