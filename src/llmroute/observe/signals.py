"""Per-backend signal gauges read at scrape time (no per-request cost): the engine signals
the collector polled (fresh ones only) and the router-side stats.

Families, each ``{backend}``: ``llmroute_backend_queue`` (waiting requests),
``llmroute_backend_running`` (running requests), ``llmroute_backend_kv_cache_usage``
(0–1), ``llmroute_backend_gpu_free_bytes``, ``llmroute_backend_in_flight`` (the router's
own count), ``llmroute_backend_output_tokens_per_second`` (router-side, else the engine's
generation throughput). A backend without a value has no sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmroute.types import BackendStats, EngineSignals, MetricsSnapshot

Reader = Callable[[EngineSignals | None, BackendStats | None], float | int | None]

GAUGES: tuple[tuple[str, str, Reader], ...] = (
    ("queue", "Requests waiting in the engine's queue",
     lambda e, s: e.waiting if e else None),
    ("running", "Requests the engine is running", lambda e, s: e.running if e else None),
    ("kv_cache_usage", "The engine's KV-cache use, 0-1",
     lambda e, s: e.kv_cache_usage if e else None),
    ("gpu_free_bytes", "Free GPU memory, bytes",
     lambda e, s: e.gpu_mem_free_bytes if e else None),
    ("in_flight", "Requests the router has in flight there",
     lambda e, s: s.in_flight if s else None),
    ("output_tokens_per_second", "Output tokens per second (router-side, else the engine's)",
     lambda e, s: (s.output_tps if s and s.output_tps is not None
                   else e.gen_throughput_tps if e else None)),
)


class SignalCollector(Collector):
    """The ``GAUGES`` of ``backend_ids`` from ``snapshot(clock())`` (``RouterStats.snapshot``:
    router-side stats plus the fresh engine signals)."""

    def __init__(self, snapshot: Callable[[float], MetricsSnapshot], backend_ids: Iterable[str],
                 clock: Callable[[], float]):
        self._snapshot, self._ids, self._clock = snapshot, list(backend_ids), clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One gauge family per signal, one sample per backend that has a value."""
        snap = self._snapshot(self._clock())
        for name, doc, read in GAUGES:
            family = GaugeMetricFamily(f"llmroute_backend_{name}", doc, labels=["backend"])
            for bid in self._ids:
                value = read(snap.engines.get(bid), snap.stats.get(bid))
                if value is not None:
                    family.add_metric([bid], float(value))
            yield family
