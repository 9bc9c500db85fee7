"""Per-backend signal gauges read at scrape time (no per-request cost): the engine signals
the collector polled (fresh ones only), the router-side stats, and how well the router can
see each backend.

Families, each ``{backend}``: ``llmroute_backend_queue`` (waiting requests),
``llmroute_backend_running`` (running requests), ``llmroute_backend_kv_cache_usage``
(0–1), ``llmroute_backend_gpu_free_bytes``, ``llmroute_backend_gpu_temp_celsius``,
``llmroute_backend_gpu_mem_bandwidth_util`` (0–1), ``llmroute_backend_net_rtt_seconds``
and ``llmroute_backend_net_bytes_per_second`` (the router's own readings on its polls),
``llmroute_backend_in_flight`` (the router's own count),
``llmroute_backend_output_tokens_per_second`` (router-side, else the engine's generation
throughput). A backend without a value has no sample.

Blindness (seed 000 §6.2: a dead exporter left unnoticed for hours misroutes traffic):
``llmroute_backend_signals_age_seconds{backend}`` — seconds since the backend's last good
poll (no sample before the first one, nor for a backend without metrics);
``llmroute_backend_dark{backend}`` — 1 while the collector has lost sight of it (its last
poll failed, or its signals are stale), else 0; ``llmroute_backend_hot{backend}`` — 1 while
the thermal latch keeps it out; ``llmroute_backend_info{backend, pool, engine}`` — 1, to
join the others with their pool (``deploy/prometheus/alerts.yml``: a pool whose every
backend is dark); ``llmroute_backend_signal_rejected_total{backend, signal}`` — readings
rejected as nonsense (NaN, negative, a unit change).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from llmroute.types import Backend, BackendStats, EngineSignals, MetricsSnapshot

Reader = Callable[[EngineSignals | None, BackendStats | None], float | int | None]


def _ms_as_s(value: float | None) -> float | None:
    return None if value is None else value / 1000.0


GAUGES: tuple[tuple[str, str, Reader], ...] = (
    ("queue", "Requests waiting in the engine's queue",
     lambda e, s: e.waiting if e else None),
    ("running", "Requests the engine is running", lambda e, s: e.running if e else None),
    ("kv_cache_usage", "The engine's KV-cache use, 0-1",
     lambda e, s: e.kv_cache_usage if e else None),
    ("gpu_free_bytes", "Free GPU memory, bytes",
     lambda e, s: e.gpu_mem_free_bytes if e else None),
    ("gpu_temp_celsius", "The hottest GPU's temperature, degrees Celsius",
     lambda e, s: e.gpu_temp_c if e else None),
    ("gpu_mem_bandwidth_util", "Share of time the GPU memory interface was busy, 0-1",
     lambda e, s: e.gpu_mem_bw_util if e else None),
    ("net_rtt_seconds", "Time from sending a metrics poll to its response headers "
     "(median of the last five), seconds", lambda e, s: _ms_as_s(e.net_rtt_ms) if e else None),
    ("net_bytes_per_second", "Metrics poll body bytes per second of transfer (median)",
     lambda e, s: e.net_bytes_per_s if e else None),
    ("in_flight", "Requests the router has in flight there",
     lambda e, s: s.in_flight if s else None),
    ("output_tokens_per_second", "Output tokens per second (router-side, else the engine's)",
     lambda e, s: (s.output_tps if s and s.output_tps is not None
                   else e.gen_throughput_tps if e else None)),
)


class Sight(Protocol):
    """What the blindness families read of the signal store (``anchor.store.SignalStore``)."""

    rejected: Mapping[tuple[str, str], int]

    def age(self, backend_id: str, now: float) -> float | None:
        """Seconds since the backend's last good signals; None when it has none."""
        ...


class SignalCollector(Collector):
    """The ``GAUGES`` of ``backends`` from ``snapshot(clock())`` (``RouterStats.snapshot``:
    router-side stats plus the fresh engine signals, the dark and hot sets), and with a
    signal store ``sight`` the blindness families (module docstring)."""

    def __init__(self, snapshot: Callable[[float], MetricsSnapshot],
                 backends: Mapping[str, Backend], clock: Callable[[], float],
                 sight: Sight | None = None):
        self._snapshot, self._clock, self._sight = snapshot, clock, sight
        self._backends = dict(backends)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """One gauge family per signal, one sample per backend that has a value; then the
        blindness families."""
        now = self._clock()
        snap = self._snapshot(now)
        for name, doc, read in GAUGES:
            family = GaugeMetricFamily(f"llmroute_backend_{name}", doc, labels=["backend"])
            for bid in self._backends:
                value = read(snap.engines.get(bid), snap.stats.get(bid))
                if value is not None:
                    family.add_metric([bid], float(value))
            yield family
        yield from self._sight_families(snap, now)

    def _sight_families(self, snap: MetricsSnapshot, now: float
                        ) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        ids = list(self._backends)
        info = GaugeMetricFamily("llmroute_backend_info", "A configured backend (1), with its "
                                 "pool and engine kind", labels=["backend", "pool", "engine"])
        for b in self._backends.values():
            info.add_metric([b.id, b.pool, b.engine], 1.0)
        yield info
        yield _flags("llmroute_backend_dark", "1 while the collector has lost sight of the "
                     "backend (last poll failed, or its signals are stale)", ids, snap.dark)
        yield _flags("llmroute_backend_hot", "1 while the backend's GPU is too hot for new "
                     "requests (thermal latch)", ids, snap.hot)
        if self._sight is None:
            return
        age = GaugeMetricFamily("llmroute_backend_signals_age_seconds", "Seconds since the "
                                "backend's last good metrics poll", labels=["backend"])
        for bid in ids:
            seconds = self._sight.age(bid, now)
            if seconds is not None:
                age.add_metric([bid], seconds)
        yield age
        rejected = CounterMetricFamily("llmroute_backend_signal_rejected", "Readings rejected "
                                       "as nonsense (NaN, negative, a unit change), by signal",
                                       labels=["backend", "signal"])
        for (bid, signal), count in sorted(self._sight.rejected.items()):
            rejected.add_metric([bid, signal], float(count))
        yield rejected


def _flags(name: str, doc: str, ids: list[str], members: frozenset[str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["backend"])
    for bid in ids:
        family.add_metric([bid], 1.0 if bid in members else 0.0)
    return family
