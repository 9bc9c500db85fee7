"""The gate's contract (DESIGN.md §4): ``await Gate.classify(request) -> Intent``, the one
entry point."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from llmroute.gate.health import GateHealth
from llmroute.types import ChatRequest, Intent


class Gate(Protocol):
    """Turns one request into the gate's verdict, on the event loop.

    ``start`` loads models without blocking the event loop; ``classify`` is the request
    path's entry point (model work off the loop); ``close`` releases threads.
    ``replace_rules`` swaps the config's override rules while serving; ``health`` counts the failures the gate tolerated, per stage (a Prometheus collector for
    the app's registry; ``health.GateHealth``).
    """

    health: GateHealth

    async def start(self) -> None:
        """Load and fit what ``classify`` needs."""
        ...

    async def classify(self, request: ChatRequest) -> Intent:
        """The intent of ``request``. Never raises for any ``request.text`` (empty, huge,
        emoji, lone surrogates); returns an ``Intent`` whose ``label`` is one of
        ``llmroute.gate.intents.INTENTS`` (or an intent added by config utterances),
        ``confidence`` and ``conflict`` in [0, 1], ``runners_up`` as
        ``((label, probability), …)`` sorted by probability, descending, and ``complexity``
        in [0.1, 5.0] (``complexity``)."""
        ...

    async def embed(self, request: ChatRequest) -> Any:
        """The gate encoder's vector of the request's latest turn (``(d,)`` float32 ndarray,
        unit length), or None when the gate has no encoder (off, rules only, not started,
        failed); never raises."""
        ...

    def replace_rules(self, rules: Mapping[str, Sequence[str]]) -> None:
        """Apply new ``gate.rules`` (intent → regexes) from now on, while serving (the
        config file's watcher, ``assemble/watch.py``). Atomic: raises ConfigError for an
        unknown intent or a bad pattern and keeps the rules it had."""
        ...

    async def close(self) -> None:
        """Release resources."""
        ...
