"""The strategy contract (DESIGN.md §4)."""

from __future__ import annotations

from typing import Protocol

from llmroute.types import ChatRequest, Intent, RoutePlan


class Strategy(Protocol):
    """Decides the pool(s) and attempt budget for a request, given the gate's intent.
    Pure; raises ModelNotFound when ``request.model`` names nothing routable."""

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan: ...
