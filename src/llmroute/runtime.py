"""The router's runtime: every part ``create_app`` needs, built from a Config.

``open_runtime(config)`` is an async context manager: it starts the local engines named by
``launch`` entries (if any), opens the pooled HTTP client, and wires gate, strategy, anchor
profile, breaker and stats. Leaving it stops engines and closes the client.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import aiohttp
import structlog

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.presets import build_profile
from llmroute.anchor.profile import Profile
from llmroute.anchor.registry import register_builtins
from llmroute.anchor.stats.router import RouterStats
from llmroute.anchor.store import SignalStore
from llmroute.anchor.wiring import anchor_shared, make_collector
from llmroute.backends.client import BackendClient
from llmroute.config import BackendConfig, Config
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.gate.factory import make_gate
from llmroute.gate.protocol import Gate
from llmroute.local.engines import EngineFleet, EngineSpec
from llmroute.observe.fuse_events import FuseEventStore
from llmroute.observe.metrics import Metrics
from llmroute.strategy.protocol import Strategy
from llmroute.strategy.single import SingleStrategy
from llmroute.types import Backend

Progress = Callable[[float, str], None]

KEEPALIVE_S = 4.0
"""Idle upstream connections are dropped after this many seconds: below llama.cpp's
server-side keep-alive (cpp-httplib's 5 s default), so the router never reuses a connection
the engine is closing."""


@dataclass
class Runtime:
    """The wired router: config, backends by id, and one instance of each part."""

    config: Config
    backends: dict[str, Backend]
    client: BackendClient
    gate: Gate
    strategy: Strategy
    profile: Profile
    breaker: CircuitBreaker
    stats: RouterStats
    metrics: Metrics
    fuse_events: FuseEventStore
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=random.Random)
    fleet: EngineFleet | None = None
    signals: SignalStore | None = None
    affinity: PrefixIndex = field(default_factory=PrefixIndex)


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
    return Backend(b.id, b.pool, b.engine, url, b.model, b.effective_context(), key, caps)


def wire(config: Config, backends: dict[str, Backend], session: aiohttp.ClientSession,
         fleet: EngineFleet | None = None) -> Runtime:
    """Assemble a Runtime over ``backends`` (no I/O)."""
    breaker = CircuitBreaker(config.breaker)
    shared = anchor_shared(config)
    profile = build_profile(config.anchor, register_builtins(), shared)
    store = SignalStore(config.anchor.stale_after_s)
    strategy = SingleStrategy(backends, config.routing.intents, config.routing.default_pool,
                              config.retry.max_attempts)
    return Runtime(config, backends, BackendClient(session, config.timeouts), make_gate(config),
                   strategy, profile, breaker,
                   RouterStats.for_backends(list(backends), store.fresh, breaker.views),
                   Metrics(breaker.views, backends, time.monotonic),
                   FuseEventStore(config.fuse.events_path), fleet=fleet, signals=store,
                   affinity=shared.affinity)


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
        await rt.gate.start()  # fits/loads in a worker thread; the loop keeps running
        stack.push_async_callback(rt.gate.close)
        await _start_collector(stack, rt)
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
