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
