"""``gate: {kind: off}``: no classification. Every request gets the default intent at once,
so ``model: auto`` always routes to ``routing.default_pool``. For deployments that route by
explicit pool or model names only, and for measuring the gateway without its gate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from llmroute.gate.health import GateHealth
from llmroute.gate.intents import DEFAULT_INTENT
from llmroute.types import ChatRequest, Intent

OFF = Intent(DEFAULT_INTENT, 0.0, complexity=1.0, source="off")


class NoGate:
    """A Gate that answers ``OFF`` (label ``chat``, confidence 0, source ``off``); nothing
    can fail, so ``health`` counts nothing."""

    def __init__(self) -> None:
        self.health = GateHealth()

    async def classify(self, request: ChatRequest) -> Intent:
        """Always ``OFF``."""
        return OFF

    def replace_rules(self, rules: Mapping[str, Sequence[str]]) -> None:
        """Nothing to do: no gate, no rules to apply."""

    async def start(self) -> None:
        """Nothing to load."""

    async def embed(self, request: ChatRequest) -> None:
        """No encoder: None."""
        return None

    async def close(self) -> None:
        """Nothing to release."""
