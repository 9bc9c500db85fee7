"""The strategy contracts (DESIGN.md §4): a kind's ``Strategy``, and the ``Selector`` the
request path asks which strategy serves a request."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from llmroute.observe.trace import Recorder
from llmroute.strategy.handoffs import HandoffStore
from llmroute.strategy.triggers import Asker
from llmroute.types import Backend, ChatRequest, Intent, RoutePlan

NO_HEADERS: Mapping[str, str] = {}
"""The headers of a request that has none to offer (read only)."""

Scorer = Callable[[ChatRequest, str], "float | None"]
"""``score(request, pool)``: the anchor's best total score (0–1) for ``request`` among
``pool``'s backends, None when every backend is filtered out (``Legs.best_score``)."""


class Strategy(Protocol):
    """Decides the pool(s) and attempt budget for a request, given the gate's intent.
    Pure; raises ModelNotFound when ``request.model`` names nothing routable."""

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan: ...

    def describe(self, request: ChatRequest, intent: Intent, score: Scorer
                 ) -> dict[str, Any]:
        """The kind's multi-step plan for ``request`` as JSON-ready data (``GET
        /debug/route``): pools, steps, thresholds and what this request would do first;
        ``score`` reads the anchor's scores. Pure, sends nothing."""
        ...


@dataclass(frozen=True, slots=True)
class KindContext:
    """What a kind's factory builds over: the router's ``backends`` (config order), the
    config's ``intents`` (label → pool) and ``default_pool``, and the request's whole
    attempt budget ``max_attempts``; ``handoffs`` the ticket queue of the ``human`` kind
    (opened on first use); ``cross_pool_fallback``: a request naming a pool may fall back to
    other pools (``routing.cross_pool_fallback``); ``lighter_pools``: pool → the lighter
    pool its degradation tiers name (``fuse.degradation``), the one other pool a request
    naming it may still be served by."""

    backends: Mapping[str, Backend]
    intents: Mapping[str, str]
    default_pool: str
    max_attempts: int
    handoffs: HandoffStore | None = None
    cross_pool_fallback: bool = False
    lighter_pools: Mapping[str, str] = field(default_factory=dict)


class Legs(Protocol):
    """The model calls (legs) a running strategy makes, all within the request's one
    attempt budget (``dispatch.Budget``): ``left`` attempts remain. Non-streamed legs may
    run concurrently: each takes its attempts (``left`` − ``reserve``) from ``left`` when
    it starts and gives back those it did not use when it ends."""

    left: int

    async def complete(self, request: ChatRequest, pool: str, reserve: int = 0
                       ) -> tuple[Backend, dict[str, Any]]:
        """``request`` (non-streamed) served by ``pool`` with failover inside the pool,
        keeping ``reserve`` attempts back for later legs; the backend that answered and its
        JSON. Raises NoBackendAvailable when the budget
        is spent or no backend of ``pool`` answers, PermissionDenied when the caller may
        not use ``pool``, or the engine's own 4xx."""
        ...

    async def stream(self, request: ChatRequest, pools: Sequence[str]
                     ) -> tuple[Backend, AsyncIterator[bytes]]:
        """``request`` (streamed) through dispatch's relay: failover before the first
        chunk, the fuse's handoffs after it. Candidates: the best backend of ``pools[0]``,
        then every backend of each later pool, then the rest of ``pools[0]`` (so a handoff
        goes to the next pool first). The backend that opened and the client's SSE bytes
        (ending with ``[DONE]`` or an error event). Raises as ``complete`` does."""
        ...

    def best_score(self, request: ChatRequest, pool: str) -> float | None:
        """The anchor's best total score (0–1) for ``request`` among ``pool``'s backends;
        None when every backend is filtered out."""
        ...


@dataclass(frozen=True, slots=True)
class Run:
    """One request being served by a Runner: the ``request``, the gate's ``intent``, the
    ``legs`` to call models through, the request's ``trace`` and the wall-clock time
    ``now`` (epoch s)."""

    request: ChatRequest
    intent: Intent
    legs: Legs
    trace: Recorder
    now: float


@dataclass(frozen=True, slots=True)
class Served:
    """A Runner's answer: a non-streamed OpenAI ``body`` (a streamed request gets it as
    SSE chunks) and the ``headers`` it adds (``x-llmroute-backend``, ``x-llmroute-pool``
    and the kind's own); or, for a streamed request the runner streams itself, the SSE
    bytes ``stream`` (``body`` then holds what is known before the stream: its
    ``llmroute`` extension and the usage of earlier legs)."""

    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    stream: AsyncIterator[bytes] | None = None


class Runner(ABC):
    """The base of a strategy that serves the request itself (several legs, or none)
    instead of handing its plan to dispatch: the strategy set tells it apart by this type
    (``snapshot.Entry.runner``)."""

    @abstractmethod
    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan:
        """The plan of the request's first leg (``Strategy.plan``)."""

    @abstractmethod
    async def serve(self, run: Run) -> Served:
        """Serve ``run.request``. Raises an LLMRouteError (OpenAI-shaped) on failure."""


@dataclass(frozen=True, slots=True)
class Trial:
    """A split or shadow strategy's choice for one request (``strategy/split.py``):
    ``strategy_id`` and ``header`` of the split (or shadow) strategy, the ``arm`` serving
    the request (its strategy id); ``shadow`` the entry of the candidate a background copy
    goes to (shadow only, else None) and ``max_in_flight`` how many copies may run at once."""

    strategy_id: str
    header: str
    arm: str
    shadow: Any = None
    max_in_flight: int = 0


class Matched(NamedTuple):
    """The strategy that serves a request and its ``plan``: ``strategy_id``, ``version``,
    ``kind``, ``header`` (``<strategy_id>@<version>``, the ``x-llmroute-strategy`` value);
    ``snapshot`` is the immutable strategy set the match was made against (a request keeps
    it, so a reload never changes a request already under way); ``runner`` is the
    strategy when it serves requests itself (None: dispatch serves ``plan``); ``trial``
    is set when a split or shadow strategy matched (the fields above are then its arm's)."""

    strategy_id: str
    version: float
    kind: str
    header: str
    plan: RoutePlan
    snapshot: object
    runner: Runner | None = None
    trial: Trial | None = None


class Selector(Protocol):
    """Matches a request against the loaded strategies and plans it (pure, no I/O)."""

    def choose(self, request: ChatRequest, intent: Intent,
               headers: Mapping[str, str] = NO_HEADERS, asker: Asker | None = None) -> Matched:
        """The highest-priority matching strategy (the built-in ``single`` when none
        matches; a split's or shadow's arm) and its plan; ``asker`` (None: read from
        ``headers``) is who the caller triggers and a split's stickiness read. Raises
        ModelNotFound for an unknown ``model``."""
        ...
