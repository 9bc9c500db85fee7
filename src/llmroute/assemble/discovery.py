"""Engine discovery: every ``discovery:`` entry's endpoints are read from its source
(``discovery/``) at start and then every ``interval_s``, turned into backends by the
entry's template, and handed to ``Reloader.rediscover`` — the reload path: newcomers are
health-checked before they take traffic (an unhealthy one waits for the next refresh),
vanished ones are drained, the swap is atomic for new requests, the same endpoints again
change nothing.

Degraded sources: a refresh that fails (DNS error, Kubernetes API unreachable, 401/403,
missing credentials) keeps the last known set, is counted in
``llmroute_discovery_refresh_failures_total{discovery,source,reason}`` and logged once
when the entry starts failing and once when it recovers; the loop goes on at its
interval (never a crash or a tight loop). A source that answers with *no* endpoints is
believed only after ``empty_grace_s``: until then the last known set keeps serving
(a rolling update or a DNS hiccup often shows an empty set for a moment); after it the
entry's backends are drained. ``llmroute_discovered_endpoints{discovery,source}`` is the
number of an entry's backends taking traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from llmroute.assemble.reload import Outcome, Reloader
from llmroute.config import BackendConfig
from llmroute.config.discovery import DiscoveryConfig
from llmroute.discovery.protocol import Endpoint, EndpointSource
from llmroute.discovery.sources import make_source
from llmroute.errors import ConfigError, DiscoveryError

log = structlog.get_logger("llmroute.discovery")


class DiscoveryMetrics:
    """The discovery metrics, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry):
        self.endpoints = Gauge("llmroute_discovered_endpoints", "Discovered backends "
                               "taking traffic", ["discovery", "source"], registry=registry)
        self.failures = Counter("llmroute_discovery_refresh_failures_total",
                                "Discovery refreshes whose source could not be read "
                                "(the last known set kept)",
                                ["discovery", "source", "reason"], registry=registry)


class Discoverer:
    """Keeps the backends of one ``entry`` in step with ``source`` through ``reloader``;
    ``clock`` (s, monotonic) times the empty-answer grace."""

    def __init__(self, entry: DiscoveryConfig, source: EndpointSource, reloader: Reloader,
                 metrics: DiscoveryMetrics, clock: Callable[[], float] = time.monotonic):
        self.entry, self.source, self.reloader = entry, source, reloader
        self.metrics, self.clock = metrics, clock
        self.failing = False
        self._empty_since: float | None = None

    async def refresh(self) -> Outcome | None:
        """One refresh; the reload's Outcome, or None when the set was kept (the source
        failed, or answered empty within the grace)."""
        labels = {"discovery": self.entry.id_prefix, "source": self.source.kind}
        try:
            found = await self.source.endpoints()
        except DiscoveryError as exc:
            self.metrics.failures.labels(**labels, reason=exc.reason).inc()
            if not self.failing:
                log.warning("discovery_failed", **labels, reason=exc.message)
            self.failing = True
            return None
        if self.failing:
            log.info("discovery_recovered", **labels)
        self.failing = False
        if self._hold_empty(found):
            return None
        outcome = await self.reloader.rediscover(self.entry.id_prefix, self._backends(found),
                                                 self.entry.health_timeout_s)
        serving = self.reloader.discovered.get(self.entry.id_prefix, ())
        self.metrics.endpoints.labels(**labels).set(len(serving))
        return outcome

    def _backends(self, found: frozenset[Endpoint]) -> tuple[BackendConfig, ...]:
        ordered = sorted(found, key=lambda e: (e[0], e[1] or 0))
        return tuple(BackendConfig.model_validate(self.entry.backend(host, port))
                     for host, port in ordered)

    def _hold_empty(self, found: frozenset[Endpoint]) -> bool:
        """True while an empty answer is within the grace and there is a set to keep."""
        if found or not self.reloader.discovered.get(self.entry.id_prefix):
            self._empty_since = None
            return False
        if self._empty_since is None:
            self._empty_since = self.clock()
            log.warning("discovery_empty", discovery=self.entry.id_prefix,
                        grace_s=self.entry.empty_grace_s)
        return self.clock() - self._empty_since < self.entry.empty_grace_s

    async def run(self) -> None:
        """Refresh every ``interval_s`` until cancelled (a refused swap is logged)."""
        while True:
            await asyncio.sleep(self.entry.interval_s)
            await self.refresh_logged()

    async def refresh_logged(self) -> None:
        """``refresh``, logging a refused swap (a strategy file that no longer loads)."""
        try:
            await self.refresh()
        except ConfigError as exc:
            log.error("discovery_refused", discovery=self.entry.id_prefix,
                      reason=exc.message)


@contextlib.asynccontextmanager
async def discovering(reloader: Reloader, entries: list[DiscoveryConfig],
                      registry: CollectorRegistry) -> AsyncIterator[list[Discoverer]]:
    """While the block runs: ``entries`` are refreshed through ``reloader`` (module
    docstring); the first refresh of each has run when the block starts. Metrics go to
    ``registry``. On exit the loops stop and the sources close."""
    if not entries:
        yield []
        return
    metrics = DiscoveryMetrics(registry)
    found = [Discoverer(e, make_source(e), reloader, metrics) for e in entries]
    try:
        for d in found:  # one at a time: each swap builds on the last
            await d.refresh_logged()
        tasks = [asyncio.create_task(d.run()) for d in found]
        try:
            yield found
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for d in found:
            await d.source.close()
