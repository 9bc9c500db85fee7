"""The request path's two results (``pipeline`` re-exports both): the ``Decision`` a
request's route is, and the ``Routed`` answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NamedTuple

from llmroute.strategy.protocol import Matched
from llmroute.types import Candidate, Intent, RoutePlan


class Routed(NamedTuple):
    """The answer: routing ``headers`` plus a JSON ``body`` or an SSE byte ``stream`` (a
    NamedTuple, as the other values made per request: half a frozen dataclass's cost)."""

    headers: dict[str, str]
    body: dict[str, Any] | None = None
    stream: AsyncIterator[bytes] | None = None


class Decision(NamedTuple):
    """What the router would do for a request, without sending it; ``strategy`` is the
    strategy that planned it (and the strategy set it was matched against)."""

    intent: Intent
    plan: RoutePlan
    candidates: list[Candidate]
    strategy: Matched
