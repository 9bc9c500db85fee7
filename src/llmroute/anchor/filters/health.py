"""Health: drop backends whose circuit breaker does not allow a request now."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend


class HealthFilter:
    """Keeps backends whose breaker view (``ctx.snapshot.breakers``) allows a request at
    ``ctx.now``. If that would drop every candidate, keeps them all (ordered as given) so
    the request still gets an attempt."""

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept. Only backends with a view (opened or held
        since they last closed) are asked; the rest are closed — with no view at all (the
        common case) the list is returned as is."""
        views = ctx.snapshot.breakers
        if not views:
            return list(candidates)
        get, now = views.get, ctx.now
        allowed = [b for b in candidates if (v := get(b.id)) is None or v.allows(now)]
        return allowed or list(candidates)
