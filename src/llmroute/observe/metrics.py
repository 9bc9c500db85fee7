"""Prometheus metrics for one app: a private ``CollectorRegistry`` (never the process-wide
default, so several apps in one process do not collide) served at ``GET /metrics``.

Families: ``llmroute_breaker_state{backend}`` (gauge: 0 closed, 1 half-open, 2 open; read
from the breaker's views at scrape time), ``llmroute_fuse_handoffs_total{backend, reason}``
(counter: handoffs away from a backend) and ``llmroute_fuse_dead_ends_total{backend,
reason}`` (counter: streams that ended in an error event because nothing could continue
them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmroute.types import BreakerState, BreakerView, BreakerViews

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BREAKER_CODES = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


class _BreakerCollector(Collector):
    def __init__(self, views: BreakerViews, backend_ids: Iterable[str],
                 clock: Callable[[], float]):
        self._views, self._ids, self._clock = views, list(backend_ids), clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The breaker state of every backend, read at scrape time."""
        now, views, closed = self._clock(), self._views(), BreakerView()
        family = GaugeMetricFamily("llmroute_breaker_state",
                                   "Circuit breaker state: 0 closed, 1 half-open, 2 open",
                                   labels=["backend"])
        for backend_id in self._ids:
            family.add_metric([backend_id],
                              BREAKER_CODES[views.get(backend_id, closed).state(now)])
        yield family


class Metrics:
    """The app's metric families over its own registry (``registry``); ``breakers`` reads
    the breaker views of ``backend_ids`` at scrape time, ``clock`` gives their ``now``."""

    def __init__(self, breakers: BreakerViews, backend_ids: Iterable[str],
                 clock: Callable[[], float]):
        self.registry = CollectorRegistry()
        self.registry.register(_BreakerCollector(breakers, backend_ids, clock))
        self.handoffs = Counter("llmroute_fuse_handoffs", "Mid-stream handoffs away from a "
                                "backend", ["backend", "reason"], registry=self.registry)
        self.dead_ends = Counter("llmroute_fuse_dead_ends", "Streams ended by an error event "
                                 "because no backend could continue them",
                                 ["backend", "reason"], registry=self.registry)

    def render(self) -> bytes:
        """The Prometheus text exposition of every family."""
        return generate_latest(self.registry)
