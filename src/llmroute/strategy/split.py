"""split and shadow: trying a strategy on live traffic before it ships.

``kind: split`` — ``arms: [{strategy, weight}, {strategy, weight}]``: each matching request
is served by one of two other strategies (named by id), each arm getting its ``weight``'s
share (> 0) of the traffic. The choice is sticky: a hash (BLAKE2b) of the caller's API key
id; without auth, of the body's ``user``; else of the client address
(``x-forwarded-for``'s first hop or ``x-real-ip``); a request with none of them is placed
by its request id. ``kind: shadow`` — ``primary`` serves every request; a copy (never
streamed) goes to ``candidate`` in the background, at most ``max_in_flight`` copies at once
(more are dropped and counted); the copy's answer is discarded, it never delays or changes
the client's. Both record each arm's latency and errors (``strategy/trials.py``).

An arm is served as if its strategy had matched (its plan or its own runner, and its own
``fallback_strategy``), whatever its ``when``: give an arm a lower ``priority`` or a ``when``
that does not match on its own. The loader refuses an arm naming an unknown strategy, the
split itself or another split/shadow strategy, and a weight ≤ 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from llmroute.strategy.protocol import KindContext, Scorer
from llmroute.strategy.spec import ID_PATTERN, StrategySpec, Strict
from llmroute.types import ChatRequest, Intent, RoutePlan

TRIAL_KINDS = frozenset({"split", "shadow"})
_SPAN = float(2 ** 64)


class ArmSpec(Strict):
    """One arm of a split: the ``strategy`` (id) serving it and its ``weight`` (> 0)."""

    strategy: str = Field(pattern=ID_PATTERN)
    weight: float = Field(1.0, gt=0)


class SplitSpec(StrategySpec):
    """``kind: split``: two ``arms``, the traffic shared by weight."""

    kind: Literal["split"]
    arms: tuple[ArmSpec, ArmSpec]

    @model_validator(mode="after")
    def _two_strategies(self) -> SplitSpec:
        if self.arms[0].strategy == self.arms[1].strategy:
            raise ValueError(f"both arms name strategy {self.arms[0].strategy!r}")
        return self

    def strategy_refs(self) -> list[tuple[tuple[Any, ...], str]]:
        """Each arm's strategy (checked across files at load)."""
        return [(("arms", i, "strategy"), a.strategy) for i, a in enumerate(self.arms)]


class ShadowSpec(StrategySpec):
    """``kind: shadow``: ``primary`` serves, ``candidate`` gets a background copy, at most
    ``max_in_flight`` at once."""

    kind: Literal["shadow"]
    primary: str = Field(pattern=ID_PATTERN)
    candidate: str = Field(pattern=ID_PATTERN)
    max_in_flight: int = Field(8, ge=1)

    @model_validator(mode="after")
    def _two_strategies(self) -> ShadowSpec:
        if self.primary == self.candidate:
            raise ValueError(f"primary and candidate are both {self.primary!r}")
        return self

    def strategy_refs(self) -> list[tuple[tuple[Any, ...], str]]:
        """The primary and the candidate (checked across files at load)."""
        return [(("primary",), self.primary), (("candidate",), self.candidate)]


class TrialStrategy:
    """A split (``arms`` with their cumulative shares) or a shadow (one arm, and the
    ``candidate``); ``weights`` are a split's arm weights as the file gives them. ``plan``
    is never used to serve: the strategy set serves the chosen arm
    (``StrategySet.choose``); it names no backend."""

    def __init__(self, arms: tuple[str, ...], bounds: tuple[float, ...], plan: RoutePlan,
                 candidate: str | None = None, max_in_flight: int = 0,
                 weights: tuple[float, ...] = ()):
        self.arms = arms
        self.weights = weights
        self._bounds = bounds
        self._plan = plan
        self.candidate = candidate
        self.max_in_flight = max_in_flight

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan:
        """A plan naming no backend (see the class docstring)."""
        return self._plan

    def describe(self, request: ChatRequest, intent: Intent, score: Scorer
                 ) -> dict[str, Any]:
        """A split's ``{"arms": [{strategy, weight, share}, …]}`` (share of traffic,
        0–1); a
        shadow's ``{"primary", "candidate", "max_in_flight"}``."""
        if self.candidate is not None:
            return {"primary": self.arms[0], "candidate": self.candidate,
                    "max_in_flight": self.max_in_flight}
        lows = (0.0, *self._bounds[:-1])
        return {"arms": [{"strategy": arm, "weight": weight, "share": round(high - low, 6)}
                         for arm, weight, low, high
                         in zip(self.arms, self.weights, lows, self._bounds)]}

    def pick(self, sticky: str) -> str:
        """The arm (strategy id) serving the caller ``sticky`` names: the same one for
        the same value, each arm for its weight's share of values."""
        if len(self.arms) == 1:
            return self.arms[0]
        digest = hashlib.blake2b(sticky.encode("utf-8", "surrogatepass"), digest_size=8)
        point = int.from_bytes(digest.digest(), "big") / _SPAN
        for arm, bound in zip(self.arms, self._bounds):
            if point < bound:
                return arm
        return self.arms[-1]


def build_split(spec: SplitSpec, ctx: KindContext) -> TrialStrategy:
    """The TrialStrategy a ``split`` file describes."""
    total = sum(a.weight for a in spec.arms)
    first = spec.arms[0].weight / total
    arms = tuple(a.strategy for a in spec.arms)
    return TrialStrategy(arms, (first, 1.0), _plan(ctx, f"split between {', '.join(arms)}"),
                         weights=tuple(a.weight for a in spec.arms))


def build_shadow(spec: ShadowSpec, ctx: KindContext) -> TrialStrategy:
    """The TrialStrategy a ``shadow`` file describes."""
    return TrialStrategy((spec.primary,), (1.0,), _plan(
        ctx, f"{spec.primary}, shadowed by {spec.candidate}"), spec.candidate,
        spec.max_in_flight)


def _plan(ctx: KindContext, reason: str) -> RoutePlan:
    return RoutePlan(ctx.default_pool, reason, (), (), ctx.max_attempts)


def sticky_of(key_id: str | None, request: ChatRequest, headers: Mapping[str, str]) -> str:
    """What a split hashes: ``key:<id>`` (auth on), else ``user:<body user>``, else
    ``addr:<client address>`` (``x-forwarded-for``'s first hop, ``x-real-ip``), else the
    request id (no stickiness to be had)."""
    if key_id:
        return f"key:{key_id}"
    user = request.body.get("user")
    if isinstance(user, str) and user:
        return f"user:{user}"
    forwarded = headers.get("x-forwarded-for") or headers.get("x-real-ip")
    if forwarded:
        return f"addr:{forwarded.split(',')[0].strip()}"
    return f"request:{request.request_id}"
