"""The gate's contract (DESIGN.md §4): ``Classifier.classify(request) -> Intent``."""

from __future__ import annotations

from typing import Protocol

from llmroute.types import ChatRequest, Intent


class Classifier(Protocol):
    """Turns one request into the gate's verdict.

    Implementations are pure and synchronous (no I/O; model inference is the caller's
    concern to move off the event loop), never raise for any ``request.text`` (empty,
    huge, emoji, lone surrogates), and return an ``Intent`` whose ``label`` is one of
    ``llmroute.gate.intents.INTENTS``, ``confidence`` and ``conflict`` in [0, 1],
    ``runners_up`` as ``((label, probability), …)`` sorted by probability, descending, and
    ``complexity`` in [0.1, 5.0].
    """

    def classify(self, request: ChatRequest) -> Intent:
        """Return the intent of ``request`` (see the class docstring for the bounds)."""
        ...


class Gate(Classifier, Protocol):
    """A ``Classifier`` the router can run: ``start`` loads models without blocking the
    event loop, ``classify_async`` is the request path's entry point (model work off the
    loop; never raises), ``close`` releases threads and watchers."""

    async def start(self) -> None:
        """Load and fit what ``classify`` needs."""
        ...

    async def classify_async(self, request: ChatRequest) -> Intent:
        """``classify`` for the event loop."""
        ...

    async def close(self) -> None:
        """Release resources."""
        ...
