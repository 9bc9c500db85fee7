"""The priority step's metrics (docs/policies.md): queue length per class, waits, sheds by
reason, and SLO attainment (first token within the class's TTFT target) per class."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

WAIT_BUCKETS = (0.0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Classed(Protocol):
    """Anything with a class ``name`` and ``ttft_target_s`` (a ``PriorityClass``)."""

    @property
    def name(self) -> str: ...

    @property
    def ttft_target_s(self) -> float: ...


class Queued(Protocol):
    """An object exposing its waiters' classes (``Waiter.klass``)."""

    @property
    def klass(self) -> Classed: ...


class PriorityMetrics:
    """Families on ``registry`` for the classes named ``names``:
    ``llmroute_priority_queue_length{class}`` (gauge), ``llmroute_priority_wait_seconds
    {class}`` (histogram; 0 for requests let through at once),
    ``llmroute_priority_shed_total{class,reason}`` (``queue_full``, ``deadline_unmeetable``,
    ``queue_timeout``, ``client_left``), ``llmroute_priority_ttft_total{class,within}``
    (``within`` ``true``/``false``: SLO attainment = true / all)."""

    def __init__(self, registry: CollectorRegistry, names: Iterable[str]):
        self.names = tuple(names)
        self._length = Gauge("llmroute_priority_queue_length",
                             "Requests waiting for admission, per priority class", ["class"],
                             registry=registry)
        self._wait = Histogram("llmroute_priority_wait_seconds",
                               "Time spent in the admission queue", ["class"],
                               buckets=WAIT_BUCKETS, registry=registry)
        self._shed = Counter("llmroute_priority_shed_total",
                             "Requests refused or dropped by the admission queue",
                             ["class", "reason"], registry=registry)
        self._ttft = Counter("llmroute_priority_ttft_total",
                             "Admitted requests by whether their first token met the class's "
                             "TTFT target", ["class", "within"], registry=registry)
        for name in self.names:
            self._length.labels(name).set(0)

    def queued(self, waiters: Iterable[Queued]) -> None:
        """Set the per-class queue lengths from the current ``waiters``."""
        counts = Tally(w.klass.name for w in waiters)
        for name in self.names:
            self._length.labels(name).set(counts.get(name, 0))

    def waited(self, klass: Classed, seconds: float) -> None:
        """One admission after ``seconds`` in the queue."""
        self._wait.labels(klass.name).observe(max(seconds, 0.0))

    def shed(self, klass: Classed, reason: str) -> None:
        """One request of ``klass`` refused or dropped for ``reason``."""
        self._shed.labels(klass.name, reason).inc()

    def left(self, klass: Classed) -> None:
        """A waiter whose client disconnected."""
        self.shed(klass, "client_left")

    def ttft(self, klass: Classed, seconds: float) -> None:
        """One first token after ``seconds`` from arrival."""
        within = "true" if seconds <= klass.ttft_target_s else "false"
        self._ttft.labels(klass.name, within).inc()

