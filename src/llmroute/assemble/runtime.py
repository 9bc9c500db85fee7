"""Config → Runtime: build every part of the router and own its lifetime.

``wire`` assembles a Runtime over given backends (no I/O). ``open_runtime(config)`` is an
async context manager: it starts the local engines named by ``launch`` entries (if any),
opens the pooled HTTP client, wires the Runtime, starts the gate and the signal collector,
and on exit stops them, closes the client and stops the engines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import structlog
from prometheus_client import CollectorRegistry

from llmroute.anchor.prefix import Affinity
from llmroute.anchor.registry import register_builtins
from llmroute.anchor.stats.router import RouterStats
from llmroute.anchor.store import SignalStore
from llmroute.assemble.anchor import (
    anchor_shared,
    build_profile,
    make_affinity,
    score_gauges,
    thermal_latch,
)
from llmroute.assemble.gate import make_gate
from llmroute.assemble.filter import build_filter
from llmroute.assemble.generations import Generations
from llmroute.assemble.cache import build_cache, share_cache
from llmroute.assemble.healing import Healing
from llmroute.assemble.policy import build_policy, build_priority, build_responses, build_store
from llmroute.assemble.stages import answer_stages
from llmroute.assemble.tasks import running
from llmroute.assemble.strategies import handoff_store, make_book
from llmroute.assemble.tokens import build_counter
from llmroute.assemble.watch import watching
from llmroute.backends.client import BackendClient
from llmroute.backends.quirks import resolve, shaper
from llmroute.config import BackendConfig, Config
from llmroute.config.price import PriceConfig
from llmroute.dispatch import Deps
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.local.engines import EngineFleet, EngineSpec
from llmroute.observe.fuse_events import FuseEventStore
from llmroute.observe.metrics import Metrics
from llmroute.observe.observer import make_observer
from llmroute.observe.quality import QualityCollector, QualityEvents
from llmroute.observe.trace import TraceContext
from llmroute.observe.signals import SignalCollector
from llmroute.runtime import Runtime
from llmroute.strategy.handoffs import HandoffStore
from llmroute.types import Backend, Price

Progress = Callable[[float, str], None]
"""Start-up progress: ``progress(fraction 0–1, message)``."""

KEEPALIVE_S = 4.0
"""Idle upstream connections are dropped after this many seconds: below llama.cpp's
server-side keep-alive (cpp-httplib's 5 s default), so the router never reuses a connection
the engine is closing."""


def make_backends(config: Config, urls: dict[str, str]) -> dict[str, Backend]:
    """Backend objects in config order; ``urls`` gives base URLs of launched engines."""
    return {b.id: _backend(b, urls, config.pools[b.pool].price) for b in config.backends}


def _backend(b: BackendConfig, urls: dict[str, str], price: PriceConfig | None) -> Backend:
    url = (b.base_url or urls[b.id]).rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    key = b.api_key or (os.environ.get(b.api_key_env) if b.api_key_env else None)
    if b.api_key_env and key is None:
        structlog.get_logger("llmroute").warning("api_key_env_unset", backend=b.id,
                                                 variable=b.api_key_env)
    caps = frozenset(b.capabilities) if b.capabilities is not None else None
    shape = shaper(b.model, resolve(b.engine, b.quirks.overrides() if b.quirks else None))
    return Backend(b.id, b.pool, b.engine, url, b.model, b.effective_context(), key, caps,
                   mode=b.mode, ttft_s=b.ttft_s, stall_s=b.stall_s, shape=shape,
                   price=None if price is None else Price(price.input_per_mtok,
                                                          price.output_per_mtok))


def wire(config: Config, backends: dict[str, Backend], session: aiohttp.ClientSession,
         fleet: EngineFleet | None = None) -> Runtime:
    """Assemble a Runtime over ``backends`` (no network I/O; reads the strategy files); its
    requests go through ``session``, each engine call carrying the request's W3C
    ``traceparent`` (``observe/trace.TraceContext``). Raises ConfigError for a bad strategy
    file."""
    breaker = CircuitBreaker(config.breaker, fleet_probes=config.state.kind == "redis")
    metrics = Metrics(breaker.views, backends, time.monotonic)
    handoffs = handoff_store(config)
    context = TraceContext()
    healing = Healing(config.quality, pools_of(backends), time.monotonic,
                      QualityEvents(None, time.time))
    parts = _per_backends(config, backends, _Fixed(
        breaker, metrics, FuseEventStore(config.fuse.events_path),
        BackendClient(session, config.timeouts, context.traceparent), make_affinity(config),
        handoffs, healing))
    metrics.registry.register(parts["collectors"])
    observer = make_observer(config.observe, metrics, context)
    observer.config_sha256 = config_sha256(config)
    healing.events.audit = observer.audit
    observer.on_finish.append(healing.observe)
    metrics.registry.register(QualityCollector(healing.report, healing.events))
    gate = make_gate(config)
    rt = Runtime(**parts, gate=gate, breaker=breaker, metrics=metrics,
                 fuse_events=parts["dispatch"].fuse_events, clock=time.monotonic,
                 wall_clock=time.time, observer=observer,
                 fleet=fleet, handoffs=handoffs,
                 policy=build_policy(config, time.monotonic, time.time,
                                     registry=metrics.registry),
                 content_filter=build_filter(config, metrics, time.time),
                 responses=build_responses(config),
                 cache=build_cache(config, gate, time.time, metrics.registry))
    rt.stages = answer_stages(rt)
    return rt


def rewire(old: Runtime, config: Config, backends: dict[str, Backend]) -> Runtime:
    """A Runtime over ``backends`` with ``config``'s pools and routing that shares with
    ``old`` every part that does not depend on the backend set (gate, breaker, metrics,
    fuse events, observer, policy, hand-offs, content filter, the HTTP client, the prefix
    index) and builds the rest anew: anchor profile, router stats, signal store, dispatch's
    view, strategy book, priority gate, token counter, answer stages and ``collectors`` (not
    registered yet: the caller swaps them in when the new Runtime starts serving). The new router
    stats start every unchanged backend from what ``old`` learned of it (latency, TTFT,
    errors, window, TTFT model: ``RouterStats.inherit``); added and changed backends start
    empty. No I/O beyond
    reading the strategy files; raises ConfigError for a bad strategy file."""
    healing = old.healing if isinstance(old.healing, Healing) else Healing(
        config.quality, {}, time.monotonic, QualityEvents(old.observer.audit, time.time))
    healing.track(pools_of(backends))
    fixed = _Fixed(old.breaker, old.metrics, old.fuse_events, old.dispatch.client,
                   old.dispatch.affinity, old.handoffs or handoff_store(config), healing)
    new = dataclasses.replace(old, **_per_backends(config, backends, fixed))
    new.stages = answer_stages(new)
    new.stats.inherit(old.stats, [i for i, b in backends.items() if old.backends.get(i) == b])
    old.observer.config_sha256 = config_sha256(config)
    return new


def config_sha256(config: Config) -> str:
    """SHA-256 (hex) of ``config``'s canonical JSON (sorted keys; its ``source`` left
    out): the config version each audit record names."""
    data = orjson.dumps(config.model_dump(mode="json", exclude={"source"}),
                        option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class _Fixed:
    """The parts a reload keeps."""

    breaker: CircuitBreaker
    metrics: Metrics
    fuse_events: FuseEventStore
    client: BackendClient
    affinity: Affinity
    handoffs: HandoffStore
    healing: Healing


def _per_backends(config: Config, backends: dict[str, Backend], fixed: _Fixed
                  ) -> dict[str, Any]:
    """The Runtime fields that depend on the backend set, as keyword arguments."""
    shared = anchor_shared(config, fixed.affinity)
    profile = build_profile(config.anchor, register_builtins(), shared)
    store = SignalStore(config.anchor.stale_after_s, thermal_latch(config.anchor))
    stats = RouterStats.for_backends(list(backends), store.fresh, fixed.breaker.views,
                                     store.dark, hot=store.hot, quality=fixed.healing.views)
    send = _deps(config, backends, fixed.client, fixed.breaker, fixed.metrics,
                 fixed.fuse_events, stats, shared.affinity, fixed.healing)
    collectors = CollectorRegistry()
    strategy = make_book(config, backends, send.wall_clock, collectors, fixed.handoffs)
    collectors.register(SignalCollector(stats.snapshot, backends, send.clock, store))
    collectors.register(score_gauges(backends, profile, stats, send.clock))
    return {"config": config, "backends": backends, "strategy": strategy, "profile": profile,
            "stats": stats, "dispatch": send, "signals": store, "collectors": collectors,
            "healing": fixed.healing,
            "priority": build_priority(config, stats, send.clock, collectors),
            "tokens": build_counter(config, backends, fixed.client)}


def pools_of(backends: dict[str, Backend]) -> dict[str, tuple[str, ...]]:
    """``{pool: (backend_id, …)}`` in config order."""
    pools: dict[str, tuple[str, ...]] = {}
    for b in backends.values():
        pools[b.pool] = (*pools.get(b.pool, ()), b.id)
    return pools


def _deps(config: Config, backends: dict[str, Backend], client: BackendClient,
          breaker: CircuitBreaker, metrics: Metrics, fuse_events: FuseEventStore,
          stats: RouterStats, affinity: Affinity, healing: Healing) -> Deps:
    healing.melts_live = True  # the relay reports each handoff as it happens
    return Deps(client, breaker, stats, affinity, metrics, fuse_events, config.retry,
                config.fuse, pools_of(backends), time.monotonic, time.time, random.Random(),
                healing.melted)


def launch_specs(config: Config) -> list[EngineSpec]:
    """EngineSpecs for the backends llmroute must start itself."""
    return [EngineSpec(b.id, b.launch.ctx_size, b.launch.slots, b.launch.threads, b.model,
                       b.launch.extra_args) for b in config.backends if b.launch is not None]


@contextlib.asynccontextmanager
async def open_runtime(config: Config, progress: Progress | None = None,
                       generations: Generations | None = None) -> AsyncIterator[Runtime]:
    """Start engines and the HTTP client; yield the Runtime; stop everything on exit. The
    Runtime's collector and strategy watcher run in ``generations`` (a new one when None;
    give one to reload the backends later: ``assemble/reload.py``), closed on exit too.

    Raises EngineError when a local engine cannot be built or started.
    """
    async with contextlib.AsyncExitStack() as stack:
        fleet, urls = await _start_fleet(stack, launch_specs(config), progress)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300,
                                         keepalive_timeout=KEEPALIVE_S)
        session = await stack.enter_async_context(
            aiohttp.ClientSession(connector=connector, auto_decompress=False))
        rt = wire(config, make_backends(config, urls), session, fleet)
        stack.callback(rt.fuse_events.close)
        if rt.handoffs is not None:
            stack.callback(rt.handoffs.close)
        stack.push_async_callback(rt.observer.close)
        if rt.responses is not None:
            stack.push_async_callback(rt.responses.close)
        if rt.policy is not None:
            stack.callback(rt.policy.keys.close)
            if rt.policy.jwt is not None:
                stack.push_async_callback(rt.policy.jwt.close)
            stack.push_async_callback(rt.policy.store.close)
            await rt.policy.store.ping()  # a shared store out of reach is logged, not fatal
        await rt.gate.start()  # fits/loads in a worker thread; the loop keeps running
        rt.metrics.registry.register(rt.gate.health)
        stack.push_async_callback(rt.gate.close)
        await _share_breakers(stack, rt)
        await _heal(stack, rt)
        await share_cache(stack, config, rt.cache)
        await stack.enter_async_context(watching(config, rt.gate, rt.content_filter))
        generations = generations or Generations()
        stack.push_async_callback(generations.close)
        await generations.open(rt)
        yield rt


async def _share_breakers(stack: contextlib.AsyncExitStack, rt: Runtime) -> None:
    """With ``state: {kind: redis}``: share the breakers with the other replicas until the
    stack closes (``state/breakers.py``); probe leases in the policies' store, or a store of
    their own with auth off."""
    state = rt.config.state
    if state.kind != "redis" or state.url is None:
        return
    store = rt.policy.store if rt.policy is not None else None
    if store is None:
        store = build_store(rt.config, rt.clock)
        stack.push_async_callback(store.close)
    from llmroute.state.breakers import FleetBreakers  # redis-py: only with a shared state

    fleet = FleetBreakers(rt.breaker, state.url, store, rt.clock, prefix=state.prefix)
    await stack.enter_async_context(fleet.run())


async def _heal(stack: contextlib.AsyncExitStack, rt: Runtime) -> None:
    """Run quality ejection's loop until the stack closes; with ``state: {kind: redis}``
    and ``quality.share_fleet``, share the answer tallies with the other replicas first
    (``state/load.py``, hash ``<prefix>quality``, once per tick)."""
    healing, state = rt.healing, rt.config.state
    if not isinstance(healing, Healing) or not healing.cfg.enabled:
        return
    if state.kind == "redis" and state.url is not None and healing.cfg.share_fleet:
        bound = rt.config.limits.state_timeout_s
        import redis.asyncio as aioredis

        from llmroute.state.load import FleetLoad, add_tallies

        redis = aioredis.Redis.from_url(state.url, socket_connect_timeout=bound,
                                        socket_timeout=bound)
        stack.push_async_callback(redis.aclose)
        tick = healing.cfg.tick_s
        fleet = FleetLoad(healing.tracker, redis, rt.clock, prefix=state.prefix,
                          interval_s=tick, stale_s=4 * tick, ttl_s=4 * tick,
                          timeout_s=bound, key="quality", add=add_tallies)
        await stack.enter_async_context(fleet.run())
    await stack.enter_async_context(running(healing.run()))


async def _start_fleet(stack: contextlib.AsyncExitStack, specs: list[EngineSpec],
                       progress: Progress | None) -> tuple[EngineFleet | None, dict[str, str]]:
    if not specs:
        return None, {}
    from llmroute.local.fleet import open_fleet

    fleet = await stack.enter_async_context(open_fleet(specs, progress))
    return fleet, {i: e.base_url for i, e in fleet.engines.items()}
