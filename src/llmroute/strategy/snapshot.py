"""The loaded strategies as one immutable StrategySet, indexed by intent label.

Matching a request looks only at the strategies filed under its intent label (and a
composite request's other labels) plus those with no ``intents`` condition; each list is
sorted best first (``priority`` high to low, then ``strategy_id``), so a list is read only
until its first match, and not at all past the best match found so far. A request no
strategy matches, or one whose ``model`` names nothing routable, gets the built-in entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmroute.strategy.protocol import NO_HEADERS, Matched, Runner, Scorer, Strategy, Trial
from llmroute.strategy.spec import StrategySpec, version_text
from llmroute.strategy.split import TrialStrategy, sticky_of
from llmroute.strategy.triggers import Asker, Facts, Trigger, compile_when
from llmroute.types import ChatRequest, Intent

BUILTIN_ID = "builtin-single"
"""The id of the built-in strategy (today's ``single`` over the config's routing), version
0: ``x-llmroute-strategy: builtin-single@0``."""


@dataclass(frozen=True)
class Entry:
    """One loaded strategy: its validated ``spec``, the ``source`` file it came from and
    that file's YAML ``root`` node (for file:line messages), the compiled ``trigger`` and
    the built ``strategy``; ``header`` is ``<strategy_id>@<version>``; ``runner`` is the
    strategy when it serves requests itself (a ``Runner``), else None."""

    spec: StrategySpec
    source: str
    root: Any
    trigger: Trigger
    strategy: Strategy
    header: str
    runner: Runner | None = None

    @classmethod
    def of(cls, spec: StrategySpec, source: str, root: Any, strategy: Strategy) -> Entry:
        """An Entry with its trigger compiled and header written."""
        header = f"{spec.strategy_id}@{version_text(spec.version)}"
        runner = strategy if isinstance(strategy, Runner) else None
        return cls(spec, source, root, compile_when(spec.when), strategy, header, runner)

    @property
    def order(self) -> tuple[float, str]:
        """The sort key: highest ``priority`` first, ties by ``strategy_id``."""
        return (-self.spec.priority, self.spec.strategy_id)


class StrategySet:
    """An immutable set of Entries over one built-in Entry; ``routable`` is every ``model``
    value a request may name (``auto``, pools, served models)."""

    def __init__(self, entries: Iterable[Entry], builtin: Entry, routable: Iterable[str]):
        ranked = sorted(entries, key=lambda e: e.order)
        self.entries: tuple[Entry, ...] = tuple(ranked)
        self.builtin = builtin
        self._routable = frozenset(routable)
        by_label: dict[str, list[tuple[int, Entry]]] = {}
        for rank, e in enumerate(ranked):
            for label in e.trigger.labels:
                by_label.setdefault(label, []).append((rank, e))
        self._by_label = {k: tuple(v) for k, v in by_label.items()}
        self._any = tuple((rank, e) for rank, e in enumerate(ranked) if not e.trigger.labels)
        self._by_id = {e.spec.strategy_id: e for e in ranked}

    def get(self, strategy_id: str) -> Entry | None:
        """The loaded entry called ``strategy_id`` (not the built-in), or None."""
        return self._by_id.get(strategy_id)

    def replaced(self, entries: Iterable[Entry]) -> StrategySet:
        """A new set of ``entries`` over the same built-in and routable models."""
        return StrategySet(entries, self.builtin, self._routable)

    def select(self, request: ChatRequest, intent: Intent,
               headers: Mapping[str, str] = NO_HEADERS, asker: Asker | None = None) -> Entry:
        """The best matching entry, else the built-in one (``asker``: see ``Facts``)."""
        if not self.entries or request.model not in self._routable:
            return self.builtin
        facts = Facts(request, intent, headers, asker)
        best_rank, best = len(self.entries), self.builtin
        for bucket in self._buckets(intent):
            for rank, entry in bucket:
                if rank >= best_rank:
                    break
                if entry.trigger.holds(facts):
                    best_rank, best = rank, entry
                    break
        return best

    def choose(self, request: ChatRequest, intent: Intent,
               headers: Mapping[str, str] = NO_HEADERS, asker: Asker | None = None
               ) -> Matched:
        """``select``, then that strategy's plan; a split or shadow strategy's arm (picked
        by ``sticky_of`` the asker's key id, the body's user or the client address) with
        ``trial`` set. Raises ModelNotFound for an unknown ``model`` (the built-in
        strategy's answer)."""
        e = self.select(request, intent, headers, asker)
        trial = None
        if isinstance(e.strategy, TrialStrategy):
            trial, e = self._trial(e, e.strategy, sticky_of(
                asker.key_id if asker is not None else None, request, headers))
        return Matched(e.spec.strategy_id, e.spec.version, e.spec.kind, e.header,
                       e.strategy.plan(request, intent), self, e.runner, trial)

    def describe(self, matched: Matched, request: ChatRequest, intent: Intent, score: Scorer,
                 headers: Mapping[str, str] = NO_HEADERS, asker: Asker | None = None
                 ) -> dict[str, Any]:
        """What ``matched`` (this set's ``choose`` answer) would do with ``request``:
        ``{"detail": {"kind", …the kind's describe()}, "trial": None | {"strategy_id",
        "header", "kind", …the split's or shadow's describe(), "arm", "sticky"}}``;
        ``sticky`` is what a split hashes (None when the request carries no API key,
        user or client address: it is then placed by request id, so the arm varies from
        request to request, and ``note`` says so). Pure, sends nothing."""
        served = self._by_id.get(matched.strategy_id)
        if served is None or served.header != matched.header:
            served = self.builtin
        out: dict[str, Any] = {"detail": self._detail(served, request, intent, score),
                               "trial": None}
        t = matched.trial
        if t is not None:
            sticky: str | None = sticky_of(asker.key_id if asker is not None else None,
                                           request, headers)
            trial = {**self._detail(self._by_id[t.strategy_id], request, intent, score),
                     "strategy_id": t.strategy_id, "header": t.header, "arm": t.arm}
            if sticky is not None and sticky.startswith("request:"):
                sticky = None
                trial["note"] = ("no sticky key (API key, user or client address): placed "
                                 "by request id, so the arm varies per request")
            out["trial"] = {**trial, "sticky": sticky}
        return out

    @staticmethod
    def _detail(e: Entry, request: ChatRequest, intent: Intent, score: Scorer
                ) -> dict[str, Any]:
        return {"kind": e.spec.kind, **e.strategy.describe(request, intent, score)}

    def _trial(self, e: Entry, split: TrialStrategy, sticky: str) -> tuple[Trial, Entry]:
        """The Trial of split entry ``e`` for ``sticky`` and the arm's entry (the loader
        saw to it that every arm is loaded and is no split itself)."""
        arm = self._by_id[split.pick(sticky)]
        shadow = None if split.candidate is None else self._by_id[split.candidate]
        return Trial(e.spec.strategy_id, e.header, arm.spec.strategy_id, shadow,
                     split.max_in_flight), arm

    def _buckets(self, intent: Intent) -> list[tuple[tuple[int, Entry], ...]]:
        buckets = [self._any, self._by_label.get(intent.label, ())]
        for label in intent.composite:
            if label != intent.label:
                buckets.append(self._by_label.get(label, ()))
        return buckets
