"""The answer cache's metrics (docs/observe.md): ``llmroute_cache_requests_total{result,
reason}`` (result ``hit-exact``, ``hit-semantic``, ``miss``, ``bypass``; reason: why a miss
or bypass — the guard that refused, ``not_found``, ``no-cache`` … — or the tier of a
hit), ``llmroute_cache_hit_seconds`` (the time to answer a hit, from the lookup's start to
the answer made: JSON, or the SSE replay ready to send), ``llmroute_cache_lookup_seconds`` (the lookup alone, hits and misses),
``llmroute_cache_entries`` and ``llmroute_cache_bytes`` (gauges, read at scrape time),
``llmroute_cache_stored_total{source}`` (``local``, ``fleet``),
``llmroute_cache_dropped_total{why}`` (``bad_entry``: did not decode; ``evicted``: LRU;
``expired``; ``purged``), ``llmroute_cache_embeds_total`` (lookups that had to embed the
prompt: the gate's verdict carried no vector)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)
"""Seconds: a hit is served in about a millisecond."""


class CacheMetrics:
    """The families above on ``registry``; ``size()`` gives ``(entries, bytes)``."""

    def __init__(self, registry: CollectorRegistry, size: Callable[[], tuple[int, int]]):
        self.requests = Counter("llmroute_cache_requests_total",
                                "Answer cache lookups by result and reason",
                                ["result", "reason"], registry=registry)
        self.hit_seconds = Histogram("llmroute_cache_hit_seconds",
                                     "Time to serve an answer from the cache",
                                     buckets=LATENCY_BUCKETS, registry=registry)
        self.lookup_seconds = Histogram("llmroute_cache_lookup_seconds",
                                        "Time of an answer cache lookup",
                                        buckets=LATENCY_BUCKETS, registry=registry)
        self.stored = Counter("llmroute_cache_stored_total", "Answers stored in the cache",
                              ["source"], registry=registry)
        self.dropped = Counter("llmroute_cache_dropped_total",
                               "Cache entries dropped, by why", ["why"], registry=registry)
        self.embeds = Counter("llmroute_cache_embeds_total",
                              "Cache lookups that embedded the prompt themselves",
                              registry=registry)
        entries = Gauge("llmroute_cache_entries", "Answers held by the cache",
                        registry=registry)
        entries.set_function(lambda: size()[0])
        held = Gauge("llmroute_cache_bytes", "Bytes of the answers held by the cache",
                     registry=registry)
        held.set_function(lambda: size()[1])
