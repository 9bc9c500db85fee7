"""The strategy contracts (DESIGN.md §4): a kind's ``Strategy``, and the ``Selector`` the
request path asks which strategy serves a request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from llmroute.types import Backend, ChatRequest, Intent, RoutePlan

NO_HEADERS: Mapping[str, str] = {}
"""The headers of a request that has none to offer (read only)."""


class Strategy(Protocol):
    """Decides the pool(s) and attempt budget for a request, given the gate's intent.
    Pure; raises ModelNotFound when ``request.model`` names nothing routable."""

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan: ...


@dataclass(frozen=True, slots=True)
class KindContext:
    """What a kind's factory builds over: the router's ``backends`` (config order), the
    config's ``intents`` (label → pool) and ``default_pool``, and the request's whole
    attempt budget ``max_attempts``."""

    backends: Mapping[str, Backend]
    intents: Mapping[str, str]
    default_pool: str
    max_attempts: int


@dataclass(frozen=True, slots=True)
class Matched:
    """The strategy that serves a request and its ``plan``: ``strategy_id``, ``version``,
    ``kind``, ``header`` (``<strategy_id>@<version>``, the ``x-llmroute-strategy`` value);
    ``snapshot`` is the immutable strategy set the match was made against (a request keeps
    it, so a reload never changes a request already under way)."""

    strategy_id: str
    version: float
    kind: str
    header: str
    plan: RoutePlan
    snapshot: object


class Selector(Protocol):
    """Matches a request against the loaded strategies and plans it (pure, no I/O)."""

    def choose(self, request: ChatRequest, intent: Intent,
               headers: Mapping[str, str] = NO_HEADERS) -> Matched:
        """The highest-priority matching strategy (the built-in ``single`` when none
        matches) and its plan. Raises ModelNotFound for an unknown ``model``."""
        ...
