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

from llmroute.anchor.filters.context_fit import ContextFitFilter
from llmroute.anchor.filters.health import HealthFilter
from llmroute.anchor.pickers.argmax import ArgmaxPicker
from llmroute.anchor.profile import Profile
from llmroute.anchor.scorers.inflight import InFlightScorer
from llmroute.anchor.scorers.latency import LatencyScorer
from llmroute.anchor.sources.router import RouterStats
from llmroute.backends.client import BackendClient
from llmroute.config import BackendConfig, Config
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.gate.protocol import Classifier
from llmroute.gate.rules import RulesClassifier
from llmroute.local.engines import EngineFleet, EngineSpec
from llmroute.strategy.protocol import Strategy
from llmroute.strategy.single import SingleStrategy
from llmroute.types import Backend

Progress = Callable[[float, str], None]


@dataclass
class Runtime:
    """The wired router: config, backends by id, and one instance of each part."""

    config: Config
    backends: dict[str, Backend]
    client: BackendClient
    gate: Classifier
    strategy: Strategy
    profile: Profile
    breaker: CircuitBreaker
    stats: RouterStats
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    fleet: EngineFleet | None = None


def make_backends(config: Config, urls: dict[str, str]) -> dict[str, Backend]:
    """Backend objects in config order; ``urls`` gives base URLs of launched engines."""
    return {b.id: _backend(b, urls) for b in config.backends}


def _backend(b: BackendConfig, urls: dict[str, str]) -> Backend:
    url = (b.base_url or urls[b.id]).rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    key = b.api_key or (os.environ.get(b.api_key_env) if b.api_key_env else None)
    return Backend(b.id, b.pool, b.engine, url, b.model, b.effective_context(), key)


def wire(config: Config, backends: dict[str, Backend], session: aiohttp.ClientSession,
         fleet: EngineFleet | None = None) -> Runtime:
    """Assemble a Runtime over ``backends`` (no I/O)."""
    breaker = CircuitBreaker(config.breaker)
    profile = Profile(filters=(ContextFitFilter(), HealthFilter(breaker)),
                      scorers=((InFlightScorer(), 0.6), (LatencyScorer(), 0.4)),
                      picker=ArgmaxPicker())
    strategy = SingleStrategy(backends, config.routing.intents, config.routing.default_pool,
                              config.retry.max_attempts)
    return Runtime(config, backends, BackendClient(session, config.timeouts), RulesClassifier(),
                   strategy, profile, breaker, RouterStats.for_backends(list(backends)),
                   fleet=fleet)


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
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        session = await stack.enter_async_context(
            aiohttp.ClientSession(connector=connector, auto_decompress=False))
        yield wire(config, make_backends(config, urls), session, fleet)


async def _start_fleet(stack: contextlib.AsyncExitStack, specs: list[EngineSpec],
                       progress: Progress | None) -> tuple[EngineFleet | None, dict[str, str]]:
    if not specs:
        return None, {}
    from llmroute.local.fleet import open_fleet

    fleet = await stack.enter_async_context(open_fleet(specs, progress))
    return fleet, {i: e.base_url for i, e in fleet.engines.items()}
