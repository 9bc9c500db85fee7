"""The anchor's current scores as gauges, computed at scrape time (no per-request cost): the
seed's weight heat map over Prometheus.

Families: ``llmroute_backend_score{backend, scorer}`` (each scorer's score, 0–1, before its
weight), ``llmroute_backend_weighted_score{backend}`` (the weighted total the picker ranks
by) and ``llmroute_scorer_weight{scorer}`` (the configured weights). Scores are those of a
neutral request ranked within the backend's pool (``anchor.report.neutral_scores``); a
scorer without an opinion on a backend has no sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

Scores = Mapping[str, tuple[Mapping[str, float | None], float | None]]
"""Per backend id: ``({scorer: score or None}, weighted total or None)``."""


class ScoreCollector(Collector):
    """Gauges over ``scores()`` (read once per scrape) and the fixed scorer ``weights``."""

    def __init__(self, scores: Callable[[], Scores], weights: Mapping[str, float]):
        self._scores, self._weights = scores, dict(weights)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The three families (see the module docstring)."""
        scores = self._scores()
        parts = GaugeMetricFamily("llmroute_backend_score", "Each scorer's score of a backend "
                                  "(0-1, unweighted)", labels=["backend", "scorer"])
        totals = GaugeMetricFamily("llmroute_backend_weighted_score", "A backend's weighted "
                                   "total score within its pool", labels=["backend"])
        for backend, (by_scorer, total) in scores.items():
            for scorer, value in by_scorer.items():
                if value is not None:
                    parts.add_metric([backend, scorer], float(value))
            if total is not None:
                totals.add_metric([backend], float(total))
        weights = GaugeMetricFamily("llmroute_scorer_weight", "The configured weight of each "
                                    "scorer", labels=["scorer"])
        for scorer, weight in self._weights.items():
            weights.add_metric([scorer], float(weight))
        yield from (parts, totals, weights)
