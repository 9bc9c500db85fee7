"""Pool membership: keep backends in the pools the plan allows."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend


class PoolFilter:
    """Keeps backends whose pool is in ``ctx.pools``; keeps all when ``ctx.pools`` is None."""

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept."""
        if ctx.pools is None:
            return list(candidates)
        return [b for b in candidates if b.pool in ctx.pools]
