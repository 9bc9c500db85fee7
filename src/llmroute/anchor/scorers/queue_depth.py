"""queue-depth: fewer requests waiting in the engine's queue is better."""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import engine, present
from llmroute.anchor.sources.signals import EngineSignals
from llmroute.types import Backend


class QueueDepthScorer:
    """``1 / (1 + waiting)`` from the engine's queue gauge (vLLM ``num_requests_waiting``,
    SGLang ``num_queue_reqs``, llama.cpp ``requests_deferred``): 1.0 with an empty queue,
    0.5 with one request waiting. Missing when the engine gives no queue signal (Ollama,
    hosted APIs) or its signals are stale."""

    name = "queue-depth"

    def score(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> dict[str, float]:
        """See the class docstring."""
        return present(candidates, lambda bid: _idle_queue(engine(ctx, bid)))


def _idle_queue(e: EngineSignals | None) -> float | None:
    return None if e is None or e.waiting is None else 1.0 / (1.0 + e.waiting)
