"""``Deps``: the few parts dispatch uses, built once with the Runtime (``rt.dispatch``).

Dispatch reads nothing else: no Runtime, no Config beyond its ``retry`` and ``fuse``
sections, so it can be driven in a unit test without building an app.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from llmroute.anchor.prefix import Affinity
from llmroute.anchor.stats.router import RouterStats
from llmroute.backends.client import BackendClient
from llmroute.config import FuseConfig, RetryConfig
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.observe.fuse_events import FuseEventStore
from llmroute.observe.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Deps:
    """What dispatch and the relay read.

    ``client`` sends requests; ``breaker`` and ``stats`` take each attempt's outcome
    (``stats``: in flight, pending prefill, latency and TTFT in ms); ``affinity`` learns
    which backend served a prompt (and prices the prefill a backend is sent); ``metrics`` counts handoffs and dead ends, which
    ``fuse_events`` stores; ``retry`` gives the back-off between attempts, ``fuse`` the
    result fuse's settings (entropy trigger, prewarm, degradation tiers); ``pools`` maps a
    pool name to its backend ids in config order (a degraded pool's health is theirs);
    ``clock`` (monotonic s) times attempts, ``wall_clock`` (epoch s) stamps canned answers
    and fuse events; ``rng`` jitters the back-off; ``melted`` (None: nobody listens) is
    told ``(backend_id, the leg's mean token entropy in nats or None)`` the moment the
    relay hands a stream off from a backend that had streamed (a handoff or dead end):
    quality ejection counts that bad answer then, not when the request ends.
    """

    client: BackendClient
    breaker: CircuitBreaker
    stats: RouterStats
    affinity: Affinity
    metrics: Metrics
    fuse_events: FuseEventStore
    retry: RetryConfig
    fuse: FuseConfig
    pools: Mapping[str, tuple[str, ...]]
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    rng: random.Random
    melted: Callable[[str, float | None], None] | None = None
