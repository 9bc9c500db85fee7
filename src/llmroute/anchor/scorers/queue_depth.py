"""queue-depth: fewer requests waiting in the engine's queue is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import NAN, ColumnScorer, engine_rows
from llmroute.types import Backend


class QueueDepthScorer(ColumnScorer):
    """``1 / (1 + waiting)`` from the engine's queue gauge (vLLM ``num_requests_waiting``,
    SGLang ``num_queue_reqs``, llama.cpp ``requests_deferred``): 1.0 with an empty queue,
    0.5 with one request waiting. Missing when the engine gives no queue signal (Ollama,
    hosted APIs) or its signals are stale."""

    name = "queue-depth"
    reads_engine = True
    bounded = True

    def column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """See the class docstring; NaN where missing."""
        return [NAN if e is None or (w := e.waiting) is None else 1.0 / (1.0 + w)
                for e in engine_rows(ctx, candidates)]
