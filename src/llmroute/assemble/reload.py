"""Backends change without a restart: ``POST /admin/reload``, ``SIGHUP`` and
``llmroute reload`` re-read the config file's ``pools``, ``backends`` and ``routing``.

A reload builds a *new* Runtime over the new backend set (``assemble.runtime.rewire``: the
gate, policies, breakers, metrics, observer, content filter and HTTP client are kept) and
swaps it into ``app.state.runtime`` in one assignment: a request reads the Runtime once
when it starts and keeps it to its end, so requests in flight finish on the old set while
new ones see only the new one. Before the swap every added or changed backend (same id,
another URL, model, pool, engine or key) must answer ``GET /health`` or ``GET /v1/models``
with 200 (``assemble/probe.py``); one that does not fails the reload and the old set keeps
serving. After the swap the old Runtime drains: no new request reaches it, and once its
requests and streams have ended (or ``server.drain_timeout_s`` has passed) its signal
collector and strategy watcher stop. The HTTP connection pool is shared, so a removed
engine's idle connections simply expire (``KEEPALIVE_S``); a request still running on it
after the deadline is not cut.

Refused, the old set kept, with the reason: a config that does not load (``file:line:
field`` messages), one that adds, removes or changes a backend llmroute starts itself
(``launch``: restart ``llmroute serve`` for that; unchanged ones keep running), a bad
strategy file, and an added or changed backend that is not healthy in time. The other
sections (server, gate, auth, limits, state, anchor, …) are not reloaded: a change there is
reported in ``ignored`` (``assemble/watch.config_diff``'s names: a section, or ``gate.FIELD``)
and needs a restart — except ``gate.rules``, which the config file's watcher applies as soon
as the file is saved (``assemble/watch.py``). With ``--workers`` every worker gets the
parent's ``SIGHUP`` and reloads its own copy of the file (an HTTP reload reaches only the
worker that took the connection: send ``SIGHUP`` to the parent instead).

Discovered backends (``discovery:``, ``assemble/discovery.py``) go through the same path:
``rediscover`` swaps in one entry's new endpoint set (newcomers health-checked, an
unhealthy one left out until the next refresh, vanished ones drained); a file reload
keeps the discovered backends as they are. A change of the ``discovery`` section itself
needs a restart (it is reported in ``ignored``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from llmroute.assemble.generations import Generations
from llmroute.assemble.probe import unhealthy
from llmroute.assemble.runtime import make_backends, rewire
from llmroute.assemble.watch import LIVE, config_diff, section
from llmroute.config import (EMBEDDED, RELOADED_SECTIONS, BackendConfig, Config,
                             load_config)
from llmroute.errors import ConfigError
from llmroute.runtime import Runtime
from llmroute.types import Backend

log = structlog.get_logger("llmroute.reload")


@dataclass(frozen=True)
class Outcome:
    """What a reload did: backend ids ``added``, ``removed``, ``changed`` (replaced) and
    ``kept``; ``ignored`` the changed settings that need a restart (a section, or
    ``gate.FIELD``); ``applied``
    False when pools, backends and routing were as before (nothing swapped)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    kept: tuple[str, ...]
    ignored: tuple[str, ...]
    applied: bool = True

    def as_json(self) -> dict[str, Any]:
        """The answer of ``POST /admin/reload``."""
        return {"object": "reload", "outcome": "applied" if self.applied else "unchanged",
                "added": list(self.added), "removed": list(self.removed),
                "changed": list(self.changed), "kept": list(self.kept),
                "ignored": list(self.ignored)}


class Reloader:
    """Reloads the backends of the app ``target`` (its ``state.runtime`` is swapped) from
    ``path``; ``generations`` holds the served Runtimes' collectors. ``health_timeout_s``
    bounds the health checks of new backends, ``drain_timeout_s`` (None: the config's
    ``server.drain_timeout_s``) the old Runtime's drain."""

    def __init__(self, target: Any, path: Path | None, generations: Generations, *,
                 health_timeout_s: float = 10.0, drain_timeout_s: float | None = None):
        self.target, self.path, self.generations = target, path, generations
        self.health_timeout_s, self.drain_timeout_s = health_timeout_s, drain_timeout_s
        self._lock = asyncio.Lock()
        self.discovered: dict[str, tuple[BackendConfig, ...]] = {}
        self.draining: set[asyncio.Task[None]] = set()

    async def reload(self) -> Outcome:
        """Apply the file's pools, backends and routing (module docstring), with the
        discovered backends as they are. Raises ConfigError (the old set keeps serving)
        with the reason."""
        async with self._lock:
            old: Runtime = self.target.state.runtime
            return await self._apply(old, self._with_discovered(self._read(old.config)))

    async def rediscover(self, prefix: str, entries: tuple[BackendConfig, ...],
                         health_timeout_s: float) -> Outcome:
        """Make ``entries`` the backends of discovery entry ``prefix`` (replacing the ones
        it found before), through the same swap and drain as ``reload``; the other
        backends, pools and routing stay. A newcomer (or changed one) that is not
        healthy within ``health_timeout_s`` is left out (logged), the rest join. Raises
        ConfigError only when a strategy file no longer loads."""
        async with self._lock:
            old: Runtime = self.target.state.runtime
            before = {b.id for group in self.discovered.values() for b in group}
            static = [b for b in old.config.backends if b.id not in before]
            ids = {b.id for b in static}
            entries = tuple(b for b in entries if b.id not in ids)  # a static id wins
            sick = await self._sick(old, entries, health_timeout_s)
            self.discovered[prefix] = tuple(b for b in entries if b.id not in sick)
            loaded = old.config.model_copy(update={"backends": static})
            return await self._apply(old, self._with_discovered(loaded), check=False)

    async def _apply(self, old: Runtime, loaded: Config, check: bool = True) -> Outcome:
        config = old.config.model_copy(update={s: getattr(loaded, s) for s in RELOADED_SECTIONS})
        backends = make_backends(config, _engine_urls(old))
        outcome = _diff(old, loaded, backends)
        if all(getattr(config, s) == getattr(old.config, s) for s in RELOADED_SECTIONS):
            (log.info if check else log.debug)("reload", outcome="unchanged",
                                               ignored=list(outcome.ignored))
            return dataclasses.replace(outcome, applied=False)
        if check:
            await self._check(old, backends, (*outcome.added, *outcome.changed))
        new = rewire(old, config, backends)
        await self._swap(old, new)
        log.info("reload", outcome="applied", added=list(outcome.added),
                 removed=list(outcome.removed), changed=list(outcome.changed),
                 ignored=list(outcome.ignored))
        return outcome

    def _with_discovered(self, loaded: Config) -> Config:
        """``loaded`` with the discovered backends after its own (an id it has wins)."""
        ids = {b.id for b in loaded.backends}
        found = [b for group in self.discovered.values() for b in group if b.id not in ids]
        return loaded.model_copy(update={"backends": [*loaded.backends, *found]})

    async def _sick(self, old: Runtime, entries: tuple[BackendConfig, ...],
                    timeout_s: float) -> set[str]:
        """Ids of the new or changed ``entries`` that are not healthy in time."""
        probe = old.config.model_copy(update={"backends": list(entries)})
        backends = make_backends(probe, {})
        fresh = [i for i, b in backends.items() if old.backends.get(i) != b]
        results = await asyncio.gather(*(unhealthy(backends[i], timeout_s) for i in fresh))
        sick = {i: why for i, why in zip(fresh, results) if why is not None}
        for i, why in sick.items():
            log.warning("discovered_backend_unhealthy", backend=i, reason=why)
        return set(sick)

    async def reload_logged(self) -> None:
        """``reload``, logging a refusal instead of raising (the ``SIGHUP`` handler)."""
        try:
            await self.reload()
        except ConfigError as exc:
            log.error("reload_refused", reason=exc.message)

    def _read(self, current: Config) -> Config:
        path = self.path or (None if current.source in (EMBEDDED, "<memory>")
                             else Path(current.source))
        if path is None:
            raise ConfigError("reload: the router was started without a config file "
                              "(--config); there is nothing to re-read")
        loaded = load_config(path)
        _check_launch(current, loaded)
        return loaded

    async def _check(self, old: Runtime, backends: dict[str, Backend],
                     ids: tuple[str, ...]) -> None:
        results = await asyncio.gather(*(unhealthy(backends[i], self.health_timeout_s)
                                         for i in ids))
        problems = [f"backend {i} ({backends[i].base_url}): {why}"
                    for i, why in zip(ids, results) if why is not None]
        if problems:
            raise ConfigError("reload: not healthy, the old backends keep serving: "
                              + "; ".join(problems), code="backend_unhealthy")

    async def _swap(self, old: Runtime, new: Runtime) -> None:
        await self.generations.open(new)
        registry = new.metrics.registry
        if new.collectors is not None:
            registry.register(new.collectors)
        self.target.state.runtime = new
        new.metrics.track(new.backends)
        if old.collectors is not None:
            registry.unregister(old.collectors)
        deadline = self.drain_timeout_s
        if deadline is None:
            deadline = old.config.server.drain_timeout_s
        task = asyncio.create_task(self._drain(old, deadline))
        self.draining.add(task)
        task.add_done_callback(self.draining.discard)

    async def _drain(self, old: Runtime, deadline_s: float) -> None:
        """Wait until ``old`` has nothing in flight (or ``deadline_s`` passed); retire it."""
        started = time.monotonic()
        while _in_flight(old) and time.monotonic() - started < deadline_s:
            await asyncio.sleep(0.05)
        left = _in_flight(old)
        (log.warning if left else log.info)("reload_drained", in_flight=left,
                                            seconds=round(time.monotonic() - started, 3))
        await self.generations.retire(old)


def _in_flight(rt: Runtime) -> int:
    """Requests ``rt``'s backends are serving now (the router's own count)."""
    return sum(s.in_flight for s in rt.stats.snapshot(rt.clock()).stats.values())


def _engine_urls(rt: Runtime) -> dict[str, str]:
    fleet = rt.fleet
    return {} if fleet is None else {i: e.base_url for i, e in fleet.engines.items()}


def _check_launch(current: Config, loaded: Config) -> None:
    """Raise ConfigError when ``loaded`` starts, stops or changes a launched engine."""
    def launched(c: Config) -> dict[str, Any]:
        return {b.id: b for b in c.backends if b.launch is not None}

    before, after = launched(current), launched(loaded)
    differ = sorted(i for i in before.keys() | after.keys() if before.get(i) != after.get(i))
    if differ:
        raise ConfigError(f"{loaded.source}: reload cannot start, stop or change engines "
                          f"llmroute launches itself (backend(s) {', '.join(differ)}); "
                          "restart llmroute serve for that")


def _diff(old: Runtime, loaded: Config, backends: dict[str, Backend]) -> Outcome:
    """How ``backends`` differ from ``old``'s, and which other settings of ``loaded``
    differ from ``old``'s config and need a restart (``watch.config_diff``'s names; not
    ``watch.LIVE``: the config file's watcher applies those)."""
    before = old.backends
    ignored = tuple(name for name in config_diff(old.config, loaded)
                    if section(name) not in RELOADED_SECTIONS and name not in LIVE)
    return Outcome(tuple(i for i in backends if i not in before),
                   tuple(i for i in before if i not in backends),
                   tuple(i for i in backends if i in before and before[i] != backends[i]),
                   tuple(i for i in backends if before.get(i) == backends[i]), ignored)
