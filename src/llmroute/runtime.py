"""The Runtime record: every part the app and the request path use, already built.

Nothing is built here: the composition root (``assemble/``) builds a Runtime from a
Config and owns its lifetime; the request path only reads it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry

from llmroute.anchor.profile import Profile
from llmroute.anchor.stats.router import RouterStats
from llmroute.anchor.store import SignalStore
from llmroute.cache.answers import AnswerCache
from llmroute.config import Config
from llmroute.dispatch.deps import Deps
from llmroute.fuse.breaker import CircuitBreaker
from llmroute.gate.protocol import Gate
from llmroute.observe.fuse_events import FuseEventStore
from llmroute.observe.metrics import Metrics
from llmroute.observe.observer import Observer
from llmroute.policy.counting import TokenCounter
from llmroute.policy.filter import ContentFilter
from llmroute.policy.gateway import Policy
from llmroute.policy.priority import PriorityGate
from llmroute.state.responses import ResponseStore
from llmroute.strategy.book import StrategyBook
from llmroute.strategy.handoffs import HandoffStore
from llmroute.types import Backend, Routed


class Healer(Protocol):
    """Quality ejection as the app reads it (``assemble.healing.Healing``)."""

    def report(self) -> dict[str, dict[str, Any]]:
        """Per backend: state, share, window tallies (``/debug/backends``)."""
        ...


class Fleet(Protocol):
    """The local engines the composition root started (``local.engines.EngineFleet``)."""

    @property
    def engines(self) -> Mapping[str, Any]:
        """Engine id → its running engine (``local.engines.LocalEngine``)."""
        ...


C = TypeVar("C", contravariant=True)


class Stage(Protocol[C]):
    """An answer stage (``flow/stages.py`` holds the contract's prose, runs the stages and
    defines the built-ins); ``C`` is the request record, ``flow.call.Call``, which holds
    this Runtime, so it is a parameter here rather than a name imported from above. A
    stage with nothing to do before the answer, or nothing to give back, has None for that
    hook: the flow skips it (a hook is a coroutine per request)."""

    @property
    def before(self) -> Callable[[C], Awaitable[Routed | None]] | None:
        """Before the strategy answers; a Routed returned answers the request early."""
        ...

    async def after(self, call: C, routed: Routed) -> Routed:
        """The answer (JSON body or stream), wrapped or changed on its way out."""
        ...

    @property
    def failed(self) -> Callable[[C, BaseException], Awaitable[None]] | None:
        """The request failed at a step from admission on: give back what this holds."""
        ...


@dataclass
class Runtime:
    """The wired router: config, backends by id, and one instance of each part.

    ``dispatch`` is dispatch's narrow view of the same parts (``dispatch.Deps``); ``clock``
    is monotonic seconds, ``wall_clock`` epoch seconds; ``strategy`` the loaded strategies
    (swapped whole on reload); ``signals`` holds the polled engine signals; ``fleet`` the
    local engines, when any were started; ``observer`` takes every request's trace (ring,
    metrics, log line, audit); ``policy`` the gateway policies (keys, limits),
    None with auth off; ``handoffs`` the ``human`` kind's ticket queue; ``content_filter``
    the sensitive-word filter, None without word lists; ``priority`` the SLO priority
    classes' admission gate, None without classes; ``tokens`` the count-tokens step
    (context length), None: the estimate alone; ``responses`` the stored answers of
    ``/v1/responses`` (None: nothing is stored); ``cache`` the answer cache (None: off,
    ``cache/answers.py``); ``collectors`` the metric families of this
    backend set (strategy reloads, engine signals, anchor scores, priority queues),
    registered in ``metrics.registry`` while this Runtime serves (a reload swaps them,
    ``assemble/reload.py``); ``stages`` the answer stages in order, outermost first (built
    by ``assemble/stages.py``; their befores run in this order, their afters in reverse);
    ``healing`` quality ejection (its views reach the anchor through ``stats``'
    snapshots), None when not wired."""

    config: Config
    backends: dict[str, Backend]
    gate: Gate
    strategy: StrategyBook
    profile: Profile
    breaker: CircuitBreaker
    stats: RouterStats
    metrics: Metrics
    fuse_events: FuseEventStore
    dispatch: Deps
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    observer: Observer
    signals: SignalStore | None = None
    fleet: Fleet | None = None
    policy: Policy | None = None
    handoffs: HandoffStore | None = None
    content_filter: ContentFilter | None = None
    priority: PriorityGate | None = None
    tokens: TokenCounter | None = None
    responses: ResponseStore | None = None
    cache: AnswerCache | None = None
    collectors: CollectorRegistry | None = None
    stages: tuple[Stage[Any], ...] = ()
    healing: Healer | None = None
