"""Config → the sensitive-word filter (``policy.filter.ContentFilter``), or None without
lists (then nothing is added to the request path); and its file watcher.

Start-up reads the lists synchronously: a missing or bad list stops the start with
``file:line`` messages. While serving, ``watch_filter`` reloads them when a list file
changes (``content_filter.watch``), as ``assemble/strategies.py`` does for strategies.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import watchfiles

from llmroute.assemble.tasks import running
from llmroute.config import EMBEDDED, Config
from llmroute.observe.metrics import Metrics
from llmroute.policy.filter import ContentFilter
from llmroute.policy.normalize import Normalizer
from llmroute.policy.wordlist import Matcher, compile_lists


def list_paths(config: Config) -> list[Path]:
    """Each list's file; a relative path is read from the config file's folder (the
    working directory for a config not read from a file)."""
    base = Path.cwd()
    if config.source != EMBEDDED and Path(config.source).is_file():
        base = Path(config.source).parent
    return [base / Path(w.path).expanduser() for w in config.content_filter.lists]


def build_filter(config: Config, metrics: Metrics, wall_clock: Callable[[], float]
                 ) -> ContentFilter | None:
    """The filter of ``config`` with its lists compiled, or None without lists. Raises
    ConfigError naming ``file:line`` for a missing, unreadable or bad list."""
    cfg = config.content_filter
    if not cfg.lists:
        return None
    paths = list_paths(config)

    def load() -> Matcher:
        return compile_lists(cfg.lists, paths, cfg.max_word_chars, Normalizer())

    return ContentFilter(load(), load, metrics.filter_hits, metrics.filter_reloads, wall_clock)


async def watch(filt: ContentFilter, paths: list[Path], *, debounce_ms: int = 200,
                stop: asyncio.Event | None = None) -> None:
    """Reload ``filt`` whenever one of the list files ``paths`` is written, replaced or
    removed (changes within ``debounce_ms`` ms are taken together), until cancelled or
    ``stop`` is set."""
    files = {p.resolve() for p in paths}
    folders = sorted({str(p.parent) for p in files})

    def ours(change: watchfiles.Change, path: str) -> bool:
        return Path(path).resolve() in files

    async for _ in watchfiles.awatch(*folders, watch_filter=ours, debounce=debounce_ms,
                                     step=50, stop_event=stop, recursive=False):
        await filt.reload()


@contextlib.asynccontextmanager
async def watch_filter(config: Config, filt: ContentFilter | None) -> AsyncIterator[None]:
    """While the block runs, reload ``filt``'s lists when their files change (when there
    is a filter and ``content_filter.watch``)."""
    if filt is None or not config.content_filter.watch:
        yield
        return
    async with running(watch(filt, list_paths(config))):
        yield
