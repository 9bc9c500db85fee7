"""The live strategies: the current StrategySet, swapped whole on reload (the folder's
watcher is ``assemble/watch.py``'s).

A reload loads the whole directory again. An invalid file keeps the old set (and says why:
log, ``llmroute_strategy_reloads_total{outcome="invalid"}``, ``status``). A changed file
whose ``version`` is not higher than the loaded one keeps its old strategy (logged, counted
in ``llmroute_strategy_stale_versions_total{strategy}``, listed in ``status.refused``); the
other changes apply. A removed file retires its strategy. The new set is swapped in with one
assignment; a request already under way keeps the set it matched against (``Matched``), so
it finishes on the versions it started with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry, Counter

from llmroute.config.yaml import describe
from llmroute.errors import ConfigError
from llmroute.strategy.loader import cross_problems
from llmroute.strategy.protocol import NO_HEADERS, Matched
from llmroute.strategy.snapshot import Entry, StrategySet
from llmroute.strategy.spec import version_text
from llmroute.strategy.trials import TrialStats
from llmroute.strategy.triggers import Asker
from llmroute.types import ChatRequest, Intent, RoutePlan


@dataclass(frozen=True)
class ReloadStatus:
    """The last load's outcome: ``loaded`` (start-up), ``applied``, ``unchanged``,
    ``refused`` (only stale versions changed) or ``invalid`` (old set kept); ``at`` epoch
    seconds; ``messages`` why a load was invalid; ``applied`` / ``retired`` the
    ``id@version`` of strategies added or changed / removed; ``refused`` one
    ``file:line: version: …`` line per stale version."""

    outcome: str
    at: float
    messages: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()
    retired: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()


class StrategyBook:
    """The Selector the request path asks (``choose`` reads the current set once).

    ``load()`` loads the directory again (raises ConfigError; run in a worker thread);
    ``wall_clock`` gives epoch seconds for ``status``; counters go to ``registry``;
    ``trials`` measures the arms of split and shadow strategies."""

    def __init__(self, current: StrategySet, load: Callable[[], StrategySet] | None,
                 wall_clock: Callable[[], float], registry: CollectorRegistry | None = None,
                 directory: str | None = None):
        self.current = current
        self.directory = directory
        self._load = load
        self._clock = wall_clock
        self.status = ReloadStatus("loaded", wall_clock(),
                                   applied=tuple(e.header for e in current.entries))
        self._reloads = Counter("llmroute_strategy_reloads", "Strategy reloads by outcome",
                                ["outcome"], registry=registry)
        self._stale = Counter("llmroute_strategy_stale_versions", "Changed strategy files "
                              "refused for a version not above the loaded one", ["strategy"],
                              registry=registry)
        self.trials = TrialStats(registry)

    def choose(self, request: ChatRequest, intent: Intent,
               headers: Mapping[str, str] = NO_HEADERS, asker: Asker | None = None
               ) -> Matched:
        """The matching strategy of the current set and its plan (see ``StrategySet``).
        Raises ModelNotFound for an unknown ``model``."""
        return self.current.choose(request, intent, headers, asker)

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan:
        """``choose(...).plan``: the Strategy contract over the whole set."""
        return self.current.choose(request, intent).plan

    async def reload(self) -> ReloadStatus:
        """Load the directory again in a worker thread and ``apply`` it (or record why it
        is invalid). Never raises for a bad file."""
        if self._load is None:
            return self.status
        try:
            loaded = await asyncio.to_thread(self._load)
        except ConfigError as exc:
            return self.refuse(exc.message)
        return self.apply(loaded)

    def refuse(self, message: str) -> ReloadStatus:
        """Keep the current set; record ``message`` (one problem a line) as ``invalid``."""
        return self._record(ReloadStatus("invalid", self._clock(),
                                         tuple(message.splitlines())))

    def apply(self, loaded: StrategySet) -> ReloadStatus:
        """Swap in ``loaded``, except that a changed strategy whose version is not above
        the loaded one keeps its loaded entry."""
        old = self.current
        entries, refused = [], []
        for e in loaded.entries:
            prev = old.get(e.spec.strategy_id)
            stale = prev is not None and prev.spec != e.spec \
                and e.spec.version <= prev.spec.version
            entries.append(prev if stale and prev is not None else e)
            if stale and prev is not None:
                refused.append(_stale_message(e, prev))
                self._stale.labels(e.spec.strategy_id).inc()
        problems = cross_problems(entries) if refused else []
        if problems:
            return self.refuse("\n".join(problems))
        new = loaded.replaced(entries) if refused else loaded
        applied = tuple(e.header for e in new.entries if _changed(old.get(e.spec.strategy_id), e))
        retired = tuple(e.header for e in old.entries if new.get(e.spec.strategy_id) is None)
        if applied or retired:
            self.current = new
        outcome = "applied" if applied or retired else "refused" if refused else "unchanged"
        return self._record(ReloadStatus(outcome, self._clock(), (), applied, retired,
                                         tuple(refused)))

    def _record(self, status: ReloadStatus) -> ReloadStatus:
        self.status = status
        self._reloads.labels(status.outcome).inc()
        log = structlog.get_logger("llmroute")
        report = log.warning if status.outcome in ("invalid", "refused") or status.refused \
            else log.info
        report("strategy_reload", outcome=status.outcome, applied=list(status.applied),
               retired=list(status.retired), refused=list(status.refused),
               problems=list(status.messages))
        return status


def _changed(prev: Entry | None, entry: Entry) -> bool:
    return prev is None or prev.spec != entry.spec


def _stale_message(entry: Entry, prev: Entry) -> str:
    text = (f"version {version_text(entry.spec.version)} is not higher than the loaded "
            f"{prev.header}: change refused")
    return describe([(("version",), text)], entry.root, entry.source)
