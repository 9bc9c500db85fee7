"""Config → Runtime: build every part of the router and own its lifetime.

``wire`` assembles a Runtime over given backends (no I/O). ``open_runtime(config)`` is an
async context manager: it starts the local engines named by ``launch`` entries (if any),
opens the pooled HTTP client, wires the Runtime, starts the gate and the signal collector,
and on exit stops them, closes the client and stops the engines.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
import structlog

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.registry import register_builtins
from llmroute.anchor.stats.router import RouterStats
from llmroute.anchor.store import SignalStore
from llmroute.assemble.anchor import anchor_shared, build_profile, make_collector
from llmroute.assemble.gate import make_gate
from llmroute.assemble.policy import build_policy
from llmroute.assemble.strategies import make_book, watch_strategies
from llmroute.backends.client import BackendClient
from llmroute.config import BackendConfig, Config
from llmroute.dispatch import Deps
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.local.engines import EngineFleet, EngineSpec
from llmroute.observe.fuse_events import FuseEventStore
from llmroute.observe.metrics import Metrics
from llmroute.observe.observer import make_observer
from llmroute.observe.signals import SignalCollector
from llmroute.runtime import Runtime
from llmroute.types import Backend

Progress = Callable[[float, str], None]
"""Start-up progress: ``progress(fraction 0–1, message)``."""

KEEPALIVE_S = 4.0
"""Idle upstream connections are dropped after this many seconds: below llama.cpp's
server-side keep-alive (cpp-httplib's 5 s default), so the router never reuses a connection
the engine is closing."""


def make_backends(config: Config, urls: dict[str, str]) -> dict[str, Backend]:
    """Backend objects in config order; ``urls`` gives base URLs of launched engines."""
    return {b.id: _backend(b, urls) for b in config.backends}


def _backend(b: BackendConfig, urls: dict[str, str]) -> Backend:
    url = (b.base_url or urls[b.id]).rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    key = b.api_key or (os.environ.get(b.api_key_env) if b.api_key_env else None)
    if b.api_key_env and key is None:
        structlog.get_logger("llmroute").warning("api_key_env_unset", backend=b.id,
                                                 variable=b.api_key_env)
    caps = frozenset(b.capabilities) if b.capabilities is not None else None
    return Backend(b.id, b.pool, b.engine, url, b.model, b.effective_context(), key, caps,
                   b.ttft_s, b.stall_s)


def wire(config: Config, backends: dict[str, Backend], session: aiohttp.ClientSession,
         fleet: EngineFleet | None = None) -> Runtime:
    """Assemble a Runtime over ``backends`` (no network I/O; reads the strategy files); its
    requests go through ``session``. Raises ConfigError for a bad strategy file."""
    breaker = CircuitBreaker(config.breaker)
    shared = anchor_shared(config)
    profile = build_profile(config.anchor, register_builtins(), shared)
    store = SignalStore(config.anchor.stale_after_s)
    stats = RouterStats.for_backends(list(backends), store.fresh, breaker.views, store.dark)
    send = dispatch_deps(config, backends, BackendClient(session, config.timeouts), breaker,
                         stats, shared.affinity)
    strategy = make_book(config, backends, send.wall_clock, send.metrics.registry)
    send.metrics.registry.register(SignalCollector(stats.snapshot, backends, send.clock))
    return Runtime(config, backends, make_gate(config), strategy, profile, breaker, stats,
                   send.metrics, send.fuse_events, send, send.clock, send.wall_clock,
                   make_observer(config.observe, send.metrics), signals=store, fleet=fleet,
                   policy=build_policy(config, send.clock, send.wall_clock))


def dispatch_deps(config: Config, backends: dict[str, Backend], client: BackendClient,
                  breaker: CircuitBreaker, stats: RouterStats, affinity: PrefixIndex
                  ) -> Deps:
    """Dispatch's narrow view over these parts, with new metrics and fuse-event store (the
    Runtime shares them) and the pools' backend ids precomputed."""
    pools: dict[str, tuple[str, ...]] = {}
    for b in backends.values():
        pools[b.pool] = (*pools.get(b.pool, ()), b.id)
    return Deps(client, breaker, stats, affinity, Metrics(breaker.views, backends, time.monotonic),
                FuseEventStore(config.fuse.events_path), config.retry, config.fuse, pools,
                time.monotonic, time.time, random.Random())


def launch_specs(config: Config) -> list[EngineSpec]:
    """EngineSpecs for the backends llmroute must start itself."""
    return [EngineSpec(b.id, b.launch.ctx_size, b.launch.slots, b.launch.threads, b.model,
                       b.launch.extra_args) for b in config.backends if b.launch is not None]


@contextlib.asynccontextmanager
async def open_runtime(config: Config, progress: Progress | None = None
                       ) -> AsyncIterator[Runtime]:
    """Start engines and the HTTP client; yield the Runtime; stop everything on exit.

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
        if rt.observer.audit is not None:
            stack.push_async_callback(rt.observer.audit.close)
        if rt.policy is not None:
            stack.callback(rt.policy.keys.close)
        await rt.gate.start()  # fits/loads in a worker thread; the loop keeps running
        rt.metrics.registry.register(rt.gate.health)
        stack.push_async_callback(rt.gate.close)
        await _start_collector(stack, rt)
        await stack.enter_async_context(watch_strategies(config, rt.strategy))
        yield rt


async def _start_collector(stack: contextlib.AsyncExitStack, rt: Runtime) -> None:
    """Poll every backend's signals until the stack closes (own session: it decompresses)."""
    session = await stack.enter_async_context(aiohttp.ClientSession())
    collector = make_collector(rt.config, rt.backends, rt.signals or SignalStore(1.0), session,
                               rt.clock)
    collector.start()
    stack.push_async_callback(collector.stop)


async def _start_fleet(stack: contextlib.AsyncExitStack, specs: list[EngineSpec],
                       progress: Progress | None) -> tuple[EngineFleet | None, dict[str, str]]:
    if not specs:
        return None, {}
    from llmroute.local.fleet import open_fleet

    fleet = await stack.enter_async_context(open_fleet(specs, progress))
    return fleet, {i: e.base_url for i, e in fleet.engines.items()}
