"""Shared fixtures: one started semantic gate (encoder included) per test session, and
``started`` for tests that need a gate of their own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from llmroute.config import GateConfig
from llmroute.gate.semantic import SemanticGate

@pytest.fixture(scope="session")
def gate() -> SemanticGate:
    """A started gate: heads fitted, the fine-tuned encoder loaded and micro-batched in
    its worker thread (the session's tests run on their own event loops; it needs none)."""
    g = SemanticGate(GateConfig())
    asyncio.run(g.start())
    assert g.model is not None and g.model.encoder is not None
    return g


@pytest.fixture
async def started() -> AsyncIterator[Callable[..., Awaitable[SemanticGate]]]:
    """``await started(cfg, **kwargs)``: a started ``SemanticGate(cfg, **kwargs)`` (pass the
    session gate's ``model=`` to skip fitting), closed after the test."""
    gates: list[SemanticGate] = []

    async def start(cfg: GateConfig, **kwargs: Any) -> SemanticGate:
        g = SemanticGate(cfg, **kwargs)
        await g.start()
        gates.append(g)
        return g

    yield start
    for g in gates:
        await g.close()
