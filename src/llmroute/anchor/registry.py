"""Type name → factory for every anchor plugin (DESIGN.md §4): filters, scorers, pickers.

Built-ins are added by ``register_builtins()`` (kebab-case names); nothing registers at
import. Factories take the ``Deps`` the runtime owns (prefix index, pool declarations,
injected randomness) and do no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.filters.capability import CapabilityFilter
from llmroute.anchor.filters.context_fit import ContextFitFilter
from llmroute.anchor.filters.health import HealthFilter
from llmroute.anchor.filters.pool import PoolFilter
from llmroute.anchor.filters.ttft_headroom import FACTOR, KEEP, SLACK_MS, TtftHeadroomFilter
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
from llmroute.anchor.scorers.prefix_affinity import PrefixAffinityScorer
from llmroute.anchor.scorers.queue_depth import QueueDepthScorer
from llmroute.anchor.scorers.throughput import ThroughputScorer
from llmroute.errors import ConfigError


@dataclass
class Deps:
    """What plugin factories may use: the prefix ``affinity`` index, the
    pools' declared strengths (``pools``), an injected ``rng`` and round-robin ``turn``,
    the softmax ``temperature``, the KV-pressure rule (fractions 0–1) and the TTFT headroom
    (``ttft_factor`` × the soonest predicted TTFT, or ``ttft_slack_ms`` ms over it; at
    least ``ttft_keep`` candidates kept)."""

    affinity: PrefixIndex = field(default_factory=PrefixIndex)
    pools: Mapping[str, PoolFit] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    turn: Turn = field(default_factory=Turn)
    temperature: float = 0.1
    kv_threshold: float = 0.8
    kv_min_fraction: float = 0.5
    ttft_factor: float = FACTOR
    ttft_slack_ms: float = SLACK_MS
    ttft_keep: int = KEEP


@dataclass
class Registry:
    """Factories by kebab-case type name, one map per plugin kind."""

    filters: dict[str, Callable[[Deps], Filter]] = field(default_factory=dict)
    scorers: dict[str, Callable[[Deps], Scorer]] = field(default_factory=dict)
    pickers: dict[str, Callable[[Deps], Picker]] = field(default_factory=dict)

    def scorer(self, name: str, deps: Deps) -> Scorer:
        """A new scorer of type ``name``; raises ConfigError for an unknown name."""
        return _make(self.scorers, "scorer", name, deps)

    def picker(self, name: str, deps: Deps) -> Picker:
        """A new picker of type ``name``; raises ConfigError for an unknown name."""
        return _make(self.pickers, "picker", name, deps)

    def filter(self, name: str, deps: Deps) -> Filter:
        """A new filter of type ``name``; raises ConfigError for an unknown name."""
        return _make(self.filters, "filter", name, deps)


def _make(table: Mapping[str, Callable[[Deps], object]], kind: str, name: str,
          deps: Deps):  # noqa: ANN202 - the table's value type
    factory = table.get(name)
    if factory is None:
        raise ConfigError(f"anchor: unknown {kind} {name!r} (known: {', '.join(sorted(table))})")
    return factory(deps)


def register_builtins(registry: Registry | None = None) -> Registry:
    """``registry`` (a new one by default) with every built-in plugin added."""
    reg = registry or Registry()
    reg.filters.update({
        "pool": lambda d: PoolFilter(),
        "context-fit": lambda d: ContextFitFilter(kv_threshold=d.kv_threshold,
                                                  kv_min_fraction=d.kv_min_fraction),
        "capability": lambda d: CapabilityFilter(),
        "health": lambda d: HealthFilter(),
        "ttft-headroom": lambda d: TtftHeadroomFilter(d.ttft_factor, d.ttft_slack_ms,
                                                            d.ttft_keep),
    })
    reg.scorers.update({
        "queue-depth": lambda d: QueueDepthScorer(), "kv-cache": lambda d: KvCacheScorer(),
        "free-vram": lambda d: FreeVramScorer(), "gpu-util": lambda d: GpuUtilScorer(),
        "in-flight": lambda d: InFlightScorer(), "latency": lambda d: LatencyScorer(),
        "error-rate": lambda d: ErrorRateScorer(), "throughput": lambda d: ThroughputScorer(),
        "health": lambda d: HealthScorer(),
        "prefix-affinity": lambda d: PrefixAffinityScorer(d.affinity),
        "intent-fit": lambda d: IntentFitScorer(d.pools),
        "expected-ttft": lambda d: ExpectedTtftScorer(),
        "kv-balance": lambda d: KvBalanceScorer(),
    })
    reg.pickers.update({
        "argmax": lambda d: ArgmaxPicker(), "p2c": lambda d: P2cPicker(d.rng),
        "softmax": lambda d: SoftmaxPicker(d.rng, d.temperature),
        "round-robin": lambda d: RoundRobinPicker(d.turn),
    })
    return reg
