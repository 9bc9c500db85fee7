"""The emulated engine's ``/metrics``: vLLM V1 names, labels and histogram buckets, rendered
by ``prometheus_client`` (one registry per engine, no process-wide state).

Names and buckets follow a real vLLM 0.20 scrape (``engine-metrics/vllm-v1-0.20.2rc1-*``):
``vllm:num_requests_running``/``waiting``, ``vllm:kv_cache_usage_perc`` (a fraction 0–1),
``vllm:num_preemptions_total``, ``vllm:prompt_tokens_total``,
``vllm:generation_tokens_total``, ``vllm:request_success_total{finished_reason}``, and the
histograms ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds`` and
``vllm:e2e_request_latency_seconds`` — all in model seconds (the emulated hardware's time,
not wall time); the info gauge ``vllm:cache_config_info`` carries the cache's
``num_gpu_blocks`` and ``block_size``. Every sample carries ``engine="0"`` and, except that
info gauge (as in vLLM), ``model_name``. With prefix caching on, the counters
``vllm:prefix_cache_queries_total`` (prompt tokens looked up) and
``vllm:prefix_cache_hits_total`` (of those, tokens found cached), as vLLM V1 counts them
(in tokens, at each admission of a request: ``PrefixCacheStats`` in
``vllm/v1/core/kv_cache_manager.py``; the 0.20 scrape shows both).

One family is the emulator's own, not vLLM's: ``llmroute_emulator_gpu_busy_seconds_total``,
the model seconds the emulated GPU spent executing steps (every step's duration, summed).
Its rate over a window is the GPU-busy fraction 0–1 — what NVML's ``utilization.gpu`` and
DCGM's ``DCGM_FI_DEV_GPU_UTIL`` report for a real GPU (the share of time a kernel ran).
``bench/schedule.py`` averages it over the fleet.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmroute.emulator.scheduler import Scheduler, TokenEvent

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _SchedulerGauges(Collector):
    """Gauges read from the scheduler at scrape time."""

    def __init__(self, scheduler: Scheduler, labels: dict[str, str]):
        self._s = scheduler
        self._labels = labels

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Running and waiting requests, KV-cache usage (fraction 0–1), as of now; the
        cache's configuration."""
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.",
             len(self._s.running)),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
             len(self._s.waiting)),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             self._s.kv_usage),
        ):
            family = GaugeMetricFamily(name, doc, labels=list(self._labels))
            family.add_metric(list(self._labels.values()), float(value))
            yield family
        yield self._cache_config()

    def _cache_config(self) -> GaugeMetricFamily:
        """vLLM's info gauge ``vllm:cache_config_info`` (value 1) with the KV cache's
        ``num_gpu_blocks`` and ``block_size`` as labels, as a real vLLM engine exports it."""
        config = self._s.config
        labels = {"block_size": str(config.block_size), "engine": self._labels["engine"],
                  "num_gpu_blocks": str(config.total_blocks)}  # no model_name, as in vLLM
        family = GaugeMetricFamily("vllm:cache_config_info",
                                   "Information of the LLMEngine CacheConfig",
                                   labels=list(labels))
        family.add_metric(list(labels.values()), 1.0)
        return family


class EngineMetrics:
    """Counters and histograms of one engine, fed with the scheduler's token events."""

    def __init__(self, scheduler: Scheduler, model_name: str):
        self._scheduler = scheduler
        self._registry = CollectorRegistry(auto_describe=True)
        labels = {"engine": "0", "model_name": model_name}
        self._registry.register(_SchedulerGauges(scheduler, labels))
        names = list(labels)
        reg = self._registry
        self._preempted = 0
        self._preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption "
                                    "from the engine.", names, registry=reg).labels(**labels)
        self._prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                               names, registry=reg).labels(**labels)
        self._generation = Counter("vllm:generation_tokens", "Number of generation tokens "
                                   "processed.", names, registry=reg).labels(**labels)
        self._success = Counter("vllm:request_success", "Count of successfully processed "
                                "requests.", [*names, "finished_reason"], registry=reg)
        self._labels = labels
        self._ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to "
                               "first token in seconds.", names, buckets=TTFT_BUCKETS,
                               registry=reg).labels(**labels)
        self._itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token "
                              "latency in seconds.", names, buckets=ITL_BUCKETS,
                              registry=reg).labels(**labels)
        self._cache_seen = (0, 0)
        self._queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms "
                                "of number of queried tokens.", names,
                                registry=reg).labels(**labels)
        self._hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of "
                             "number of cached tokens.", names, registry=reg).labels(**labels)
        self._e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request "
                              "latency in seconds.", names, buckets=E2E_BUCKETS,
                              registry=reg).labels(**labels)
        self._busy = Counter("llmroute_emulator_gpu_busy_seconds", "Model seconds the "
                             "emulated GPU spent executing steps (llmroute's emulator, not "
                             "vLLM).", names, registry=reg).labels(**labels)

    def record(self, events: list[TokenEvent], step_s: float) -> None:
        """Account one completed step: its ``events`` and its duration ``step_s`` (model s;
        the inter-token latency of every sequence that decoded in it, and GPU-busy time)."""
        self._busy.inc(step_s)
        for e in events:
            self._generation.inc()
            if e.first:
                self._prompt.inc(e.prompt_tokens)
                self._ttft.observe(e.at - e.arrival)
            else:
                self._itl.observe(step_s)
            if e.finished:
                self._success.labels(**self._labels, finished_reason="length").inc()
                self._e2e.observe(e.at - e.arrival)
        new = self._scheduler.preemptions - self._preempted
        if new:
            self._preemptions.inc(new)
            self._preempted = self._scheduler.preemptions
        self._count_cache()

    def _count_cache(self) -> None:
        """Add the prefix cache's queried and hit tokens since the last step."""
        cache = self._scheduler.cache
        if cache is None or (cache.queries, cache.hits) == self._cache_seen:
            return
        queries, hits = self._cache_seen
        self._queries.inc(cache.queries - queries)
        self._hits.inc(cache.hits - hits)
        self._cache_seen = (cache.queries, cache.hits)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self._registry)
