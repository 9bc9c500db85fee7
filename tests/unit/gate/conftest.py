"""Shared fixtures: one fitted semantic gate (encoder included) per test session."""

from __future__ import annotations

import pytest

from llmroute.config import GateConfig
from llmroute.gate.semantic import SemanticGate


@pytest.fixture(scope="session")
def gate() -> SemanticGate:
    """A started-equivalent gate: heads fitted, MiniLM exported (cached) and loaded."""
    g = SemanticGate(GateConfig())
    g.load()
    assert g.model is not None and g.model.encoder is not None
    return g
