"""Building the anchor from config: the profile (filters, scorers, picker, each with its own
params), the runtime objects its plugins share and the signal collector.

Called by ``assemble/runtime.py``; no I/O here except what the returned collector does once
started.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import aiohttp

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.kv_index import KvEventIndex
from llmroute.anchor.prefix import Affinity
from llmroute.anchor.collector import Collector
from llmroute.anchor.protocol import MetricsSource
from llmroute.anchor.presets import resolve
from llmroute.anchor.profile import Profile
from llmroute.anchor.readings import ThermalLatch
from llmroute.anchor.registry import Registry, Shared
from llmroute.anchor.report import neutral_scores
from llmroute.anchor.stats.router import RouterStats
from llmroute.anchor.scorers.intent_fit import PoolFit
from llmroute.anchor.sources.gpu import WithGpu
from llmroute.anchor.sources.http import DcgmSource, source_for
from llmroute.anchor.sources.nvml import NvmlSource
from llmroute.anchor.store import SignalStore
from llmroute.config import BackendConfig, Config
from llmroute.config.anchor import AnchorConfig
from llmroute.observe.scores import ScoreCollector
from llmroute.types import Backend


def anchor_shared(config: Config, affinity: Affinity | None = None) -> Shared:
    """The runtime objects the plugins share: the prefix ``affinity`` (None: a new one,
    ``make_affinity``), the pools' declarations from ``config`` (read by intent-fit) and the
    default injected randomness."""
    pools = {name: PoolFit(p.strengths, p.max_complexity) for name, p in config.pools.items()}
    return Shared(affinity or make_affinity(config), pools)


def make_affinity(config: Config) -> Affinity:
    """The prefix affinity of ``config``: the router-side index with the
    ``prefix-affinity`` scorer's params, and a KV-event index over the backends with a
    ``kv_events`` endpoint (none: no event index; the params' ``events: false``: none)."""
    params = config.anchor.params("scorer", "prefix-affinity")
    index = PrefixIndex(params.block_tokens, params.max_blocks,  # type: ignore[attr-defined]
                        params.capacity)  # type: ignore[attr-defined]
    publishing = [b.id for b in config.backends if b.kv_events]
    events = KvEventIndex(publishing) if publishing and params.events else None  # type: ignore[attr-defined]
    return Affinity(index, events)


def signal_sources(config: Config, backends: dict[str, Backend],
                   session: aiohttp.ClientSession) -> dict[str, tuple[Backend, MetricsSource]]:
    """``{backend_id: (backend, source)}`` for every backend that exposes signals (an
    engine metrics endpoint and/or a configured GPU)."""
    timeout = config.anchor.poll_timeout_s
    out: dict[str, tuple[Backend, MetricsSource]] = {}
    for bc in config.backends:
        source = _source(bc, session, timeout)
        if source is not None:
            out[bc.id] = (backends[bc.id], source)
    return out


def _source(bc: BackendConfig, session: aiohttp.ClientSession,
            timeout: float) -> MetricsSource | None:
    engine = source_for(bc.engine, session, timeout)
    gpu = _gpu(bc, session, timeout)
    if engine is not None and gpu is not None:
        return WithGpu(engine, gpu)
    return engine or gpu


def _gpu(bc: BackendConfig, session: aiohttp.ClientSession,
         timeout: float) -> MetricsSource | None:
    if bc.gpu is None:
        return None
    if bc.gpu.nvml_index is not None:
        return NvmlSource(bc.gpu.nvml_index)
    return DcgmSource(session, bc.gpu.dcgm_url or "", bc.gpu.gpu, timeout)


def thermal_latch(cfg: AnchorConfig) -> ThermalLatch:
    """The store's thermal latch at ``cfg``'s limit and hysteresis (°C); with no limit
    (``thermal_limit_c: null``) one that never latches, so the thermal filter is inert."""
    limit = cfg.thermal_limit_c if cfg.thermal_limit_c is not None else float("inf")
    return ThermalLatch(limit, cfg.thermal_hysteresis_c)


def make_collector(config: Config, backends: dict[str, Backend], store: SignalStore,
                   session: aiohttp.ClientSession,
                   clock: Callable[[], float] = time.monotonic) -> Collector:
    """A collector over every backend's sources, with the configured period and timeout.
    ``session`` should decompress responses (engines may gzip ``/metrics``)."""
    a = config.anchor
    return Collector(signal_sources(config, backends, session), store, clock,
                     period_s=a.poll_interval_s, timeout_s=a.poll_timeout_s)


def build_profile(cfg: AnchorConfig, registry: Registry, shared: Shared) -> Profile:
    """The Profile for ``cfg``, each plugin built with its own params (``cfg.params``) and
    ``shared``; raises ConfigError naming an unknown filter, scorer or picker type."""
    preset = resolve(cfg)
    for kind in ("filter", "scorer", "picker"):
        registry.check(kind, cfg.entries(kind))
    shared.affinity.pricing = dict(preset.weights).get("prefix-affinity", 0) != 0
    return Profile(
        filters=tuple(registry.filter(name, shared, cfg.params("filter", name))
                      for name in preset.filters()),
        scorers=tuple((registry.scorer(name, shared, cfg.params("scorer", name)), w)
                      for name, w in preset.weights),
        picker=registry.picker(preset.picker, shared, cfg.params("picker", preset.picker)))


def score_gauges(backends: dict[str, Backend], profile: Profile, stats: RouterStats,
                 clock: Callable[[], float]) -> ScoreCollector:
    """The anchor's scores of every backend as gauges, computed at scrape time from the
    router's snapshot at ``clock()`` (``observe/scores.py``)."""
    def scores() -> dict[str, tuple[dict[str, float | None], float | None]]:
        now = clock()
        return neutral_scores(backends, profile, stats.snapshot(now), now)

    return ScoreCollector(scores, {s.name: w for s, w in profile.scorers})
