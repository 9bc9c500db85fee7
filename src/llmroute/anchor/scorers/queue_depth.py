"""queue-depth: fewer requests waiting in the engine's queue is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend


class QueueDepthScorer:
    """``1 / (1 + waiting)`` from the engine's queue gauge (vLLM ``num_requests_waiting``,
    SGLang ``num_queue_reqs``, llama.cpp ``requests_deferred``): 1.0 with an empty queue,
    0.5 with one request waiting. Missing when the engine gives no queue signal (Ollama,
    hosted APIs) or its signals are stale."""

    name = "queue-depth"

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring."""
        engines = ctx.snapshot.engines
        out = {}
        for b in candidates:
            e = engines.get(b.id)
            if e is not None and e.waiting is not None:
                out[b.id] = 1.0 / (1.0 + e.waiting)
        return out
