"""Config → the sensitive-word filter (``policy.filter.ContentFilter``), or None without
lists (then nothing is added to the request path).

Start-up reads the lists synchronously: a missing or bad list stops the start with
``file:line`` messages. While serving, ``assemble/watch.py`` reloads them when a list file
changes (``content_filter.watch``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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
