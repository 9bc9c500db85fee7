"""Every file the running router follows, in one place: the config file, the strategy
folder and the sensitive-word lists; and the one diff between two configs.

All three go through ``follow``, the one ``watchfiles`` loop: it watches *folders* (not
recursively) and keeps the events that name the files it follows, so an editor's or a
Kubernetes ConfigMap's atomic-rename save (write a temporary file, ``rename`` it over the
old one) is seen every time — a watch on the file itself follows the old inode and goes
blind after the first such save. A Kubernetes ConfigMap volume replaces its files by
swapping its ``..data`` link to a new ``..TIMESTAMP`` folder (the files are links through
``..data``): an event on a name starting with ``..`` counts as a change of every file
followed in that folder. Changes within ``DEBOUNCE_MS`` are taken together. A lost folder
(removed, unmounted) is logged (``watch_lost``) and watched again ``RETRY_S`` later.

**The config file** (``ConfigWatch``; whatever ``gate.kind`` is, whenever the router was
started from a file): on each save whose content differs, the whole file is loaded and
validated and compared with the last version (``config_diff``). What a running router can
apply is applied at once: ``gate.rules`` (``Gate.replace_rules``). What the reload path
applies (``pools``, ``backends``, ``routing``: ``llmroute reload``, ``SIGHUP`` or ``POST
/admin/reload``, ``assemble/reload.py``) is named as waiting for a reload
(``needs_reload``); every other changed setting as needing a restart (``needs_restart``).
One log line says which: ``config_reloaded`` (info) when something was applied,
``config_change_needs_reload`` (info) when only reloadable sections changed,
``config_change_needs_restart`` (warning) when a change needs a restart; an invalid file
is logged (``config_not_reloaded``) and everything stays as it was.

**The strategy folder** (``watch_strategies``, with ``strategies.watch``): any added,
changed or removed strategy file reloads the whole folder (``StrategyBook.reload``: a bad
file keeps the old set). **The word lists** (``watching``, with
``content_filter.watch``): a changed, replaced or removed list file compiles every list
again (``ContentFilter.reload``: a bad list keeps the old ones). A change of the
``strategies`` or ``content_filter`` *section* of the config is a setting like any other:
it needs a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import structlog
import watchfiles

from llmroute.assemble.filter import list_paths
from llmroute.assemble.strategies import strategy_dir
from llmroute.assemble.tasks import running
from llmroute.config import EMBEDDED, RELOADED_SECTIONS, Config, load_config
from llmroute.errors import ConfigError
from llmroute.gate.protocol import Gate
from llmroute.policy.filter import ContentFilter
from llmroute.strategy.book import StrategyBook
from llmroute.strategy.loader import SUFFIXES

DEBOUNCE_MS = 200
STEP_MS = 50
"""How often watchfiles looks for the end of a burst of changes (ms)."""
TIMEOUT_MS = 5_000
"""How long watchfiles' thread waits before handing back to the loop with no change (ms;
its default on Linux)."""
RETRY_S = 1.0
"""How long a lost folder waits before it is watched again (s)."""
LIVE = frozenset({"gate.rules"})
"""The settings a running router applies from a saved config file; the reload path applies
``RELOADED_SECTIONS``, the rest need a restart."""
Loader = Callable[[Path], Config]
"""Loads and validates the config file (``config.load_config``); raises ConfigError."""
_log = structlog.get_logger("llmroute.watch")


async def follow(folders: Sequence[Path], keep: Callable[[str], bool],
                 changed: Callable[[], Awaitable[None]], *, debounce_ms: int = DEBOUNCE_MS,
                 stop: asyncio.Event | None = None) -> None:
    """Await ``changed()`` after each burst of events in ``folders`` (not recursive) on a
    path ``keep(path)`` accepts, or on a ConfigMap's ``..`` entries, until ``stop`` is set
    or the task is cancelled. A lost folder is logged and watched again after ``RETRY_S``;
    never raises for it."""
    def ours(_change: watchfiles.Change, path: str) -> bool:
        return Path(path).name.startswith("..") or keep(path)

    while stop is None or not stop.is_set():
        try:
            async for _ in watchfiles.awatch(*folders, watch_filter=ours,
                                             debounce=debounce_ms, step=STEP_MS,
                                             rust_timeout=TIMEOUT_MS, stop_event=stop,
                                             recursive=False):
                await changed()
            return
        except OSError as err:  # a folder went away: wait, then watch it again
            _log.warning("watch_lost", folders=[str(f) for f in folders], error=str(err))
            await asyncio.sleep(RETRY_S)


def config_diff(old: Config, new: Config) -> list[str]:
    """Dotted names of the settings that differ between ``old`` and ``new``, in config
    order: a top-level section (``routing``, ``timeouts``, …), or for ``gate`` its fields
    (``gate.rules``, ``gate.cache_ttl_s``, …). ``source`` (the file name) is not a
    setting."""
    a, b = old.model_dump(exclude={"source"}), new.model_dump(exclude={"source"})
    out: list[str] = []
    for key in dict.fromkeys([*a, *b]):
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        if key == "gate" and isinstance(x, dict) and isinstance(y, dict):
            out += [f"gate.{k}" for k in dict.fromkeys([*x, *y]) if x.get(k) != y.get(k)]
        else:
            out.append(key)
    return out


def section(name: str) -> str:
    """The top-level section of a ``config_diff`` name (``gate.rules`` → ``gate``)."""
    return name.split(".", 1)[0]


class ConfigWatch:
    """Follows the config file at ``path`` (module docstring) and applies ``gate.rules``
    to ``gate``; ``reloads`` counts the saves that applied something, ``bursts`` every burst
    of events seen (also those that changed nothing). ``load`` reads the file
    (``config.load_config``). Construction does no I/O."""

    def __init__(self, path: Path, gate: Gate, load: Loader = load_config):
        self.path, self.gate, self._load = Path(path).absolute(), gate, load
        self.reloads = self.bursts = 0
        self._digest: bytes | None = None
        self._config: Config | None = None

    async def run(self, *, debounce_ms: int = DEBOUNCE_MS,
                  stop: asyncio.Event | None = None) -> None:
        """Read the file as it is now (the version later saves are compared with), then
        follow it until ``stop`` is set or the task is cancelled; never raises for a bad
        file."""
        self._digest, self._config = _digest(self.path), self._try_load()
        name = self.path.name
        await follow([self.path.parent], lambda p: Path(p).name == name, self.changed,
                     debounce_ms=debounce_ms, stop=stop)

    async def changed(self) -> None:
        """One burst of events: load the file when its content changed, apply what can be
        applied, log the outcome."""
        self.bursts += 1
        digest = _digest(self.path)
        if digest is None or digest == self._digest:
            return
        try:
            new = self._load(self.path)
            # no earlier version to compare with: apply the rules, flag everything else
            changed = config_diff(self._config, new) if self._config is not None \
                else ["gate.rules", "*"]
            if "gate.rules" in changed:
                self.gate.replace_rules(new.gate.rules)
        except ConfigError as err:
            _log.warning("config_not_reloaded", path=str(self.path), error=err.message)
            return
        self._digest, self._config = digest, new
        applied = [c for c in changed if c in LIVE]
        self.reloads += bool(applied)
        _report(self.path, changed, self.reloads)

    def _try_load(self) -> Config | None:
        try:
            return self._load(self.path)
        except ConfigError:
            return None


def _digest(path: Path) -> bytes | None:
    """The file's content hash; None when it cannot be read (mid-replace, removed)."""
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


def _report(path: Path, changed: list[str], reloads: int) -> None:
    applied = [c for c in changed if c in LIVE]
    reload = [c for c in changed if c in RELOADED_SECTIONS]
    restart = [c for c in changed if c not in LIVE and c not in RELOADED_SECTIONS]
    fields = {"path": str(path), "applied": applied, "needs_reload": reload,
              "needs_restart": restart}
    if applied:
        _log.info("config_reloaded", **fields, reloads=reloads)
    elif restart:
        _log.warning("config_change_needs_restart", **fields)
    elif reload:
        _log.info("config_change_needs_reload", **fields,
                  hint="apply with `llmroute reload` or SIGHUP")
    else:
        _log.debug("config_saved_unchanged", path=str(path))


def config_file(config: Config) -> Path | None:
    """The file ``config`` was read from; None for the embedded default or one built in
    memory."""
    if config.source == EMBEDDED:
        return None
    path = Path(config.source)
    return path if path.is_file() else None


async def strategy_files(book: StrategyBook, directory: Path, *,
                         debounce_ms: int = DEBOUNCE_MS,
                         stop: asyncio.Event | None = None) -> None:
    """Reload ``book`` whenever a strategy file in ``directory`` is added, changed or
    removed, until ``stop`` is set or the task is cancelled."""
    async def reload() -> None:
        await book.reload()

    await follow([directory], lambda p: Path(p).suffix in SUFFIXES, reload,
                 debounce_ms=debounce_ms, stop=stop)


async def word_lists(filt: ContentFilter, paths: Sequence[Path], *,
                     debounce_ms: int = DEBOUNCE_MS, stop: asyncio.Event | None = None) -> None:
    """Reload ``filt`` whenever one of the list files ``paths`` is written, replaced or
    removed, until ``stop`` is set or the task is cancelled."""
    files = {p.resolve() for p in paths}
    folders = sorted({p.parent for p in files})

    async def reload() -> None:
        await filt.reload()

    await follow(folders, lambda p: Path(p).resolve() in files, reload,
                 debounce_ms=debounce_ms, stop=stop)


@contextlib.asynccontextmanager
async def watch_strategies(config: Config, book: StrategyBook) -> AsyncIterator[None]:
    """While the block runs, reload ``book`` when its files change (when the config has
    ``strategies.watch``). One per served Runtime: a reload's new Runtime has its own
    book (``assemble/generations.py``)."""
    directory = strategy_dir(config)
    if directory is None or config.strategies is None or not config.strategies.watch:
        yield
        return
    async with running(strategy_files(book, directory)):
        yield


@contextlib.asynccontextmanager
async def watching(config: Config, gate: Gate, filt: ContentFilter | None
                   ) -> AsyncIterator[None]:
    """While the block runs: follow the config file (when ``config`` was read from one),
    applying its ``gate.rules`` to ``gate``; and ``filt``'s word lists (when there is a
    filter and ``content_filter.watch``). Both outlive a reload: the gate and the filter
    are kept by it (``assemble/runtime.rewire``)."""
    async with contextlib.AsyncExitStack() as stack:
        path = config_file(config)
        if path is not None:
            await stack.enter_async_context(running(ConfigWatch(path, gate).run()))
        if filt is not None and config.content_filter.watch:
            await stack.enter_async_context(running(word_lists(filt, list_paths(config))))
        yield
