"""Tolerated failures: the semantic gate answers through a failing encoder or model path,
counts every failure in ``llmroute_gate_failures_total{stage}`` and logs only when a stage's
state changes (healthy → failing → healthy)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from llmroute.config import GateConfig
from llmroute.gate.compress import prompt_request
from llmroute.gate.health import GateHealth
from llmroute.gate.semantic import SemanticGate

Start = Callable[..., Awaitable[SemanticGate]]

# broken? per request: healthy, three failures, two successes, one failure, one success
BROKEN = [False, True, True, True, False, False, True, False]
TRANSITIONS = [("gate stage failing", "warning"), ("gate stage recovered", "info"),
               ("gate stage failing", "warning"), ("gate stage recovered", "info")]


class Switch:
    """Flipped by the test: while ``broken``, ``check`` raises."""

    broken = False

    def check(self) -> None:
        if self.broken:
            raise RuntimeError("stage broke")


class Flaky:
    """A real model part behind a switch: the encoder (``encode``) or the n-gram head
    (``proba``)."""

    def __init__(self, inner: object, switch: Switch) -> None:
        self.inner, self.switch = inner, switch

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.switch.check()
        return self.inner.encode(texts)

    def proba(self, texts: Sequence[str]) -> np.ndarray:
        self.switch.check()
        return self.inner.proba(texts)


async def run(g: SemanticGate, switch: Switch) -> tuple[list[str], list[dict]]:
    """Classify one fresh English prompt per entry of ``BROKEN``; (sources, gate-stage logs)."""
    sources = []
    with capture_logs() as logs:
        for i, broken in enumerate(BROKEN):
            switch.broken = broken
            request = prompt_request(f"how do I make my sourdough less sour, attempt {i}?")
            sources.append((await g.classify(request)).source)
    return sources, [e for e in logs if e["event"].startswith("gate stage")]


def failures(health: GateHealth, stage: str) -> float | None:
    registry = CollectorRegistry()
    registry.register(health)
    return registry.get_sample_value("llmroute_gate_failures_total", {"stage": stage})


async def test_encoder_failures_are_counted_and_logged_once_per_state_change(
        gate: SemanticGate, started: Start) -> None:
    switch = Switch()
    g = await started(GateConfig(second_opinion_below=1.0, cache_size=0),
                      model=replace(gate.model, encoder=Flaky(gate.model.encoder, switch)))
    sources, logs = await run(g, switch)
    assert sources == ["fast" if broken else "fast+encoder" for broken in BROKEN]
    assert [(e["event"], e["log_level"]) for e in logs] == TRANSITIONS
    assert {e["stage"] for e in logs} == {"encoder"}
    assert [e["failures"] for e in logs if "failures" in e] == [3, 1]
    assert "stage broke" in logs[0]["error"]
    assert failures(g.health, "encoder") == 4 and failures(g.health, "model") == 0


async def test_model_path_failures_answer_from_the_rules_counted_and_logged_by_state(
        gate: SemanticGate, started: Start) -> None:
    switch = Switch()
    g = await started(GateConfig(cache_size=0),
                      model=replace(gate.model, fast=Flaky(gate.model.fast, switch)))
    sources, logs = await run(g, switch)
    assert [s == "rules" for s in sources] == BROKEN
    assert [(e["event"], e["log_level"]) for e in logs] == TRANSITIONS
    assert {e["stage"] for e in logs} == {"model"}
    assert failures(g.health, "model") == 4 and failures(g.health, "encoder") == 0


@pytest.mark.parametrize("stages", [(), ("encoder", "model")], ids=["none", "semantic"])
def test_every_stage_is_served_from_zero(stages: tuple[str, ...]) -> None:
    health = GateHealth(*stages)
    assert [failures(health, s) for s in stages] == [0.0] * len(stages)


def sample(health: GateHealth, name: str) -> float | None:
    registry = CollectorRegistry()
    registry.register(health)
    return registry.get_sample_value(name)


async def test_the_cache_s_hits_misses_and_hit_ratio_are_served(gate: SemanticGate,
                                                                 started: Start) -> None:
    g = await started(GateConfig(), model=gate.model)
    assert sample(g.health, "llmroute_gate_cache_hit_ratio") is None  # no lookup yet
    for text in ("Translate 'good morning' into French.", "Write a haiku about rain.",
                 "Translate 'good morning' into French.", "Translate 'good morning' into French."):
        await g.classify(prompt_request(text))
    assert sample(g.health, "llmroute_gate_cache_hits_total") == 2
    assert sample(g.health, "llmroute_gate_cache_misses_total") == 2
    assert sample(g.health, "llmroute_gate_cache_hit_ratio") == 0.5
