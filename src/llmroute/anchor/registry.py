"""Type name → factory for every anchor plugin (DESIGN.md §4): filters, scorers, pickers.

Built-ins are added by ``register_builtins()`` (kebab-case names); nothing registers at
import. A factory takes the plugin's own ``params`` (an instance of its model in
``config_anchor.PLUGIN_PARAMS``, ``NoParams`` for a plugin without any) and the ``Shared``
runtime objects, of which it uses only what it needs; factories do no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llmroute.anchor.prefix import Affinity
from llmroute.anchor.filters.capability import CapabilityFilter
from llmroute.anchor.filters.context_fit import ContextFitFilter
from llmroute.anchor.filters.health import HealthFilter
from llmroute.anchor.filters.pool import PoolFilter
from llmroute.anchor.filters.quality import QualityFilter
from llmroute.anchor.filters.sample import SampleFilter
from llmroute.anchor.filters.thermal import ThermalFilter
from llmroute.anchor.filters.ttft_headroom import TtftHeadroomFilter
from llmroute.anchor.pickers.argmax import ArgmaxPicker
from llmroute.anchor.pickers.p2c import P2cPicker
from llmroute.anchor.pickers.round_robin import RoundRobinPicker, Turn
from llmroute.anchor.pickers.softmax import SoftmaxPicker
from llmroute.anchor.protocol import Filter, Picker, Scorer
from llmroute.anchor.scorers.error_rate import ErrorRateScorer
from llmroute.anchor.scorers.expected_ttft import ExpectedTtftScorer
from llmroute.anchor.scorers.free_vram import FreeVramScorer
from llmroute.anchor.scorers.gpu_util import GpuUtilScorer
from llmroute.anchor.scorers.health import HealthScorer
from llmroute.anchor.scorers.inflight import InFlightScorer
from llmroute.anchor.scorers.intent_fit import IntentFitScorer, PoolFit
from llmroute.anchor.scorers.kv_balance import KvBalanceScorer
from llmroute.anchor.scorers.kv_cache import KvCacheScorer
from llmroute.anchor.scorers.latency import LatencyScorer
from llmroute.anchor.scorers.mem_bandwidth import MemBandwidthScorer
from llmroute.anchor.scorers.network import NetworkScorer
from llmroute.anchor.scorers.prefix_affinity import PrefixAffinityScorer
from llmroute.anchor.scorers.queue_depth import QueueDepthScorer
from llmroute.anchor.scorers.throughput import ThroughputScorer
from llmroute.config.anchor import PLUGIN_PARAMS, Kind, NoParams
from llmroute.errors import ConfigError

T = TypeVar("T")


@dataclass
class Shared:
    """The runtime objects plugins share — not settings, which are each plugin's params:
    the prefix ``affinity`` (prefix-affinity; with pricing on, the expected-TTFT model and
    the ttft-headroom filter price only the uncached prompt), the pools' declared strengths
    (``pools``, intent-fit) and an injected ``rng`` (p2c, softmax)."""

    affinity: Affinity = field(default_factory=Affinity)
    pools: Mapping[str, PoolFit] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(0))


Factory = Callable[[Any, Shared], T]
"""``(params, shared) -> plugin``."""


@dataclass
class Registry:
    """Factories by kebab-case type name, one map per plugin kind."""

    filters: dict[str, Factory[Filter]] = field(default_factory=dict)
    scorers: dict[str, Factory[Scorer]] = field(default_factory=dict)
    pickers: dict[str, Factory[Picker]] = field(default_factory=dict)

    def filter(self, name: str, shared: Shared, params: Any = None) -> Filter:
        """A new filter of type ``name`` with ``params`` (None: its defaults); raises
        ConfigError for an unknown name."""
        return _make(self.filters, "filter", name, shared, params)

    def scorer(self, name: str, shared: Shared, params: Any = None) -> Scorer:
        """A new scorer of type ``name`` (as ``filter``)."""
        return _make(self.scorers, "scorer", name, shared, params)

    def picker(self, name: str, shared: Shared, params: Any = None) -> Picker:
        """A new picker of type ``name`` (as ``filter``)."""
        return _make(self.pickers, "picker", name, shared, params)

    def check(self, kind: Kind, names: Iterable[str]) -> None:
        """Raise ConfigError naming the first of ``names`` not registered as a ``kind``."""
        table = {"filter": self.filters, "scorer": self.scorers, "picker": self.pickers}[kind]
        for name in names:
            _factory(table, kind, name)


def _make(table: Mapping[str, Factory[T]], kind: Kind, name: str, shared: Shared,
          params: Any) -> T:
    factory = _factory(table, kind, name)
    if params is None:
        params = PLUGIN_PARAMS[kind].get(name, NoParams)()
    return factory(params, shared)


def _factory(table: Mapping[str, Factory[T]], kind: Kind, name: str) -> Factory[T]:
    factory = table.get(name)
    if factory is None:
        raise ConfigError(f"anchor: unknown {kind} {name!r} (known: {', '.join(sorted(table))})")
    return factory


def register_builtins(registry: Registry | None = None) -> Registry:
    """``registry`` (a new one by default) with every built-in plugin added."""
    reg = registry or Registry()
    reg.filters.update({
        "pool": lambda p, s: PoolFilter(),
        "context-fit": lambda p, s: ContextFitFilter(kv_threshold=p.kv_threshold,
                                                     kv_min_fraction=p.kv_min_fraction),
        "capability": lambda p, s: CapabilityFilter(),
        "health": lambda p, s: HealthFilter(),
        "thermal": lambda p, s: ThermalFilter(),
        "quality": lambda p, s: QualityFilter(),
        "ttft-headroom": lambda p, s: TtftHeadroomFilter(p.factor, p.slack_ms, p.keep,
                                                         s.affinity),
        "sample": lambda p, s: SampleFilter(p.above, p.size, s.affinity, s.rng),
    })
    reg.scorers.update({
        "queue-depth": lambda p, s: QueueDepthScorer(), "kv-cache": lambda p, s: KvCacheScorer(),
        "free-vram": lambda p, s: FreeVramScorer(), "gpu-util": lambda p, s: GpuUtilScorer(),
        "in-flight": lambda p, s: InFlightScorer(), "latency": lambda p, s: LatencyScorer(),
        "error-rate": lambda p, s: ErrorRateScorer(),
        "throughput": lambda p, s: ThroughputScorer(), "health": lambda p, s: HealthScorer(),
        "prefix-affinity": lambda p, s: PrefixAffinityScorer(s.affinity, p.priced),
        "intent-fit": lambda p, s: IntentFitScorer(s.pools),
        "expected-ttft": lambda p, s: ExpectedTtftScorer(s.affinity),
        "kv-balance": lambda p, s: KvBalanceScorer(),
        "mem-bandwidth": lambda p, s: MemBandwidthScorer(),
        "network": lambda p, s: NetworkScorer(),
    })
    reg.pickers.update({
        "argmax": lambda p, s: ArgmaxPicker(), "p2c": lambda p, s: P2cPicker(s.rng),
        "softmax": lambda p, s: SoftmaxPicker(s.rng, p.temperature),
        "round-robin": lambda p, s: RoundRobinPicker(Turn()),
    })
    return reg
