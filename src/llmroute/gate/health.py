"""Tolerated failures of the gate's stages: counted, and logged when a stage's state changes.

The semantic gate tolerates two kinds of failure without failing the request (its stages):

- ``encoder``: the encoder (or the worker thread it runs in) raised; the first stage answers
  alone, as when no encoder is loaded;
- ``model``: anything else in the model path raised; the rules classifier answers.

A stage is healthy or failing. The first failure of a healthy stage logs a warning naming
the error; the first success of a failing stage logs, once, that it recovered and how many
failures the episode had; failures in between are only counted. ``GateHealth`` is a
Prometheus collector: register it in the app's registry and it serves
``llmroute_gate_failures_total{stage}`` (every failure since the gate was built) and the
gate cache's lookups, ``llmroute_gate_cache_hits_total`` / ``_misses_total`` and
``llmroute_gate_cache_hit_ratio`` (hits / lookups, 0–1; no sample before the first
lookup), read at scrape time, so the request path only adds to plain integers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class StageHealth:
    """One stage's failure count (``failures``) and state (``failing``); see the module
    docstring. Not thread-safe: call it from the event loop."""

    def __init__(self, stage: str, log: Any) -> None:
        self.stage = stage
        self.failures = 0
        self.failing = False
        self._episode_start = 0
        self._log = log

    def failed(self, err: BaseException) -> None:
        """Count a failure; log a warning if the stage was healthy."""
        self.failures += 1
        if not self.failing:
            self.failing, self._episode_start = True, self.failures - 1
            self._log.warning("gate stage failing", stage=self.stage, error=repr(err))

    def ok(self) -> None:
        """Note a success; log once if the stage was failing."""
        if self.failing:
            self.failing = False
            self._log.info("gate stage recovered", stage=self.stage,
                           failures=self.failures - self._episode_start)


class GateHealth(Collector):
    """The named ``stages`` of one gate (``stages[name]`` is a ``StageHealth``), served as
    the counter ``llmroute_gate_failures_total{stage}``. A gate with no stage that can fail
    passes none (the family is then served without samples)."""

    def __init__(self, *stages: str) -> None:
        log = structlog.get_logger("llmroute.gate")
        self.stages = {name: StageHealth(name, log) for name in stages}
        self.cache_hits = 0
        self.cache_misses = 0

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """The failure count of every stage and the cache's lookups, read now."""
        family = CounterMetricFamily("llmroute_gate_failures", "Tolerated failures of a gate "
                                     "stage (encoder: the first stage answered alone; model: "
                                     "the rules answered)", labels=["stage"])
        for name, stage in self.stages.items():
            family.add_metric([name], stage.failures)
        yield family
        hits, misses = self.cache_hits, self.cache_misses
        yield CounterMetricFamily("llmroute_gate_cache_hits", "Gate verdicts answered from "
                                  "its cache", value=hits)
        yield CounterMetricFamily("llmroute_gate_cache_misses", "Gate verdicts computed "
                                  "(not in its cache)", value=misses)
        ratio = GaugeMetricFamily("llmroute_gate_cache_hit_ratio", "Gate cache hits per "
                                  "lookup since start (0-1)")
        if hits + misses:
            ratio.add_metric([], hits / (hits + misses))
        yield ratio
