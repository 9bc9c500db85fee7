"""Prometheus metrics for one app: a private ``CollectorRegistry`` (never the process-wide
default, so several apps in one process do not collide) served at ``GET /metrics``.

Families (label values are bounded: backend ids, pools, intents and strategies come from
the config and strategy files, statuses are HTTP codes; never request ids or text):

* ``llmroute_breaker_state{backend}`` — gauge: 0 closed, 1 half-open, 2 open (read from
  the breaker's views at scrape time);
* ``llmroute_fuse_handoffs_total{backend, reason}`` / ``llmroute_fuse_dead_ends_total``
  — handoffs away from a backend / streams ended by an error event;
* ``llmroute_requests_total{pool, backend, intent, strategy, status, api}`` — answered
  requests (``backend`` is ``none`` when no backend served it; ``api`` the surface asked:
  ``chat``, ``completions``, ``embeddings``, ``messages``, ``responses``);
* ``gen_ai_server_request_duration_seconds{pool, backend}``,
  ``gen_ai_server_time_to_first_token_seconds{pool, backend}`` and
  ``gen_ai_server_time_per_output_token_seconds{pool, backend}`` — histograms (the
  OpenTelemetry GenAI names; TTFT and TPOT for streamed answers);
* ``gen_ai_client_token_usage{pool, backend, gen_ai_token_type}`` — tokens per request,
  ``input`` or ``output`` (its ``_sum`` is the tokens in/out total);
* ``llmroute_gate_duration_seconds{source}`` — the gate's time by the stage that answered;
* ``llmroute_streamed_legs_total{backend}`` and ``llmroute_melt_rate{backend}`` — streamed
  legs a backend served, and handoffs away from it per such leg (gauge, at scrape time);
* ``llmroute_fuse_mean_entropy_nats{backend}`` — the mean per-token entropy (nats, the
  fuse's lower bound) of a backend's recent streamed legs: an EWMA of each leg's mean
  (weight ``EntropyMeans.ALPHA``), gauge at scrape time; rising means the answers grow
  less sure (seed 000 §6.3);
* ``llmroute_content_filter_hits_total{list, action, direction}`` — word-list matches
  (``direction``: ``input`` or ``output``) / ``llmroute_content_filter_reloads_total{outcome}``
  — word-list reloads, ``applied`` or ``invalid`` (the old lists kept);
* ``llmroute_quirks_learned_total{backend, quirk}`` — request-body quirks learned from an
  engine's refusal (``dispatch/adapt.py``);
* ``llmroute_audit_dropped_total`` / ``llmroute_audit_failures_total`` — decision-audit
  records dropped (queue full) / batches the disk refused;
* ``llmroute_cost_total{pool, tenant, key}`` — spend on priced pools in their price's
  currency unit (``tenant``/``key`` ``none`` with auth off; ``key`` is the key id).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmroute.types import BreakerState, BreakerView, BreakerViews

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BREAKER_CODES = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                   60.0, 120.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
                1.0)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)
GATE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)


class _BreakerCollector(Collector):
    def __init__(self, views: BreakerViews, backend_ids: Iterable[str],
                 clock: Callable[[], float]):
        self._views, self.ids, self._clock = views, list(backend_ids), clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The breaker state of every backend, read at scrape time."""
        now, views, closed = self._clock(), self._views(), BreakerView()
        family = GaugeMetricFamily("llmroute_breaker_state",
                                   "Circuit breaker state: 0 closed, 1 half-open, 2 open",
                                   labels=["backend"])
        for backend_id in self.ids:
            family.add_metric([backend_id],
                              BREAKER_CODES[views.get(backend_id, closed).state(now)])
        yield family


class MeltRate(Collector):
    """Streamed legs and handoffs per backend (plain counts, bumped once per request), and
    ``llmroute_melt_rate{backend}`` = handoffs / legs, computed at scrape time."""

    def __init__(self) -> None:
        self.legs: dict[str, int] = {}
        self.handoffs: dict[str, int] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The melt rate of every backend that served a streamed leg."""
        family = GaugeMetricFamily("llmroute_melt_rate", "Handoffs away from a backend per "
                                   "streamed leg it served", labels=["backend"])
        for backend, legs in sorted(self.legs.items()):
            family.add_metric([backend], self.handoffs.get(backend, 0) / legs)
        yield family


class EntropyMeans(Collector):
    """Per backend, an EWMA of its streamed legs' mean per-token entropy (nats), bumped
    once per leg that had entropies (``add``), served as
    ``llmroute_fuse_mean_entropy_nats{backend}``."""

    ALPHA = 0.1
    """Each leg's weight in the moving mean: about the last 20 legs count."""

    def __init__(self) -> None:
        self.means: dict[str, float] = {}

    def add(self, backend: str, total_nats: float, tokens: int) -> None:
        """One leg's ``tokens`` entropies summing to ``total_nats``."""
        mean = total_nats / tokens
        old = self.means.get(backend)
        self.means[backend] = mean if old is None else old + self.ALPHA * (mean - old)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The moving mean of every backend that streamed a leg with entropies."""
        family = GaugeMetricFamily("llmroute_fuse_mean_entropy_nats", "Mean per-token "
                                   "entropy (nats) of a backend's recent streamed legs (EWMA)",
                                   labels=["backend"])
        for backend, mean in sorted(self.means.items()):
            family.add_metric([backend], mean)
        yield family


class Metrics:
    """The app's metric families over its own registry (``registry``); ``breakers`` reads
    the breaker views of ``backend_ids`` at scrape time, ``clock`` gives their ``now``."""

    def __init__(self, breakers: BreakerViews, backend_ids: Iterable[str],
                 clock: Callable[[], float]):
        self.registry = r = CollectorRegistry()
        self._breakers = _BreakerCollector(breakers, backend_ids, clock)
        r.register(self._breakers)
        self.handoffs = Counter("llmroute_fuse_handoffs", "Mid-stream handoffs away from a "
                                "backend", ["backend", "reason"], registry=r)
        self.dead_ends = Counter("llmroute_fuse_dead_ends", "Streams ended by an error event "
                                 "because no backend could continue them",
                                 ["backend", "reason"], registry=r)
        self.requests = Counter("llmroute_requests", "Answered requests",
                                ["pool", "backend", "intent", "strategy", "status", "api"],
                                registry=r)
        where = ["pool", "backend"]
        self.duration = Histogram("gen_ai_server_request_duration_seconds", "Request duration",
                                  where, buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("gen_ai_server_time_to_first_token_seconds", "Time to first "
                              "token of streamed answers", where, buckets=LATENCY_BUCKETS,
                              registry=r)
        self.tpot = Histogram("gen_ai_server_time_per_output_token_seconds", "Time per output "
                              "token after the first, streamed answers", where,
                              buckets=TPOT_BUCKETS, registry=r)
        self.tokens = Histogram("gen_ai_client_token_usage", "Tokens per request by type",
                                [*where, "gen_ai_token_type"], buckets=TOKEN_BUCKETS,
                                registry=r)
        self.gate = Histogram("llmroute_gate_duration_seconds", "The gate's classification "
                              "time by the stage that answered", ["source"],
                              buckets=GATE_BUCKETS, registry=r)
        self.legs = Counter("llmroute_streamed_legs", "Streamed legs a backend served",
                            ["backend"], registry=r)
        self.melt = MeltRate()
        r.register(self.melt)
        self.entropy = EntropyMeans()
        r.register(self.entropy)
        self.filter_hits = Counter("llmroute_content_filter_hits", "Sensitive-word matches "
                                   "by list, action and direction",
                                   ["list", "action", "direction"], registry=r)
        self.filter_reloads = Counter("llmroute_content_filter_reloads", "Word-list reloads "
                                      "by outcome", ["outcome"], registry=r)
        self.audit_dropped = Counter("llmroute_audit_dropped", "Decision-audit records "
                                     "dropped because the write queue was full", registry=r)
        self.audit_failures = Counter("llmroute_audit_failures", "Decision-audit batches the "
                                      "disk refused (missing, read-only or full)", registry=r)
        self.decision = Histogram("llmroute_decision_duration_seconds", "Routing decision "
                                  "time per request: gate + strategy + anchor",
                                  buckets=GATE_BUCKETS, registry=r)
        self.quirks_learned = Counter("llmroute_quirks_learned", "Request-body quirks "
                                      "learned from an engine's refusal", ["backend", "quirk"],
                                      registry=r)
        self.trace_store_dropped = Counter("llmroute_trace_store_dropped", "Traces not "
                                           "stored because the write queue was full",
                                           registry=r)
        self.trace_store_failures = Counter("llmroute_trace_store_failures", "Trace-store "
                                            "batches the disk refused", registry=r)
        self.cost = Counter("llmroute_cost", "Spend on priced pools, in the pools' price "
                            "currency unit", ["pool", "tenant", "key"], registry=r)

    def track(self, backend_ids: Iterable[str]) -> None:
        """Report the breaker state of ``backend_ids`` from now on (a reload changed the
        backend set); the other families keep every label they have counted."""
        self._breakers.ids = list(backend_ids)

    def render(self) -> bytes:
        """The Prometheus text exposition of every family."""
        return generate_latest(self.registry)
