"""The strategy book of a config: load the ``strategies.dir`` files (or none).

Start-up reads the files synchronously (a bad file stops the start with file:line: field
messages); while serving, ``assemble/watch.py`` reloads them on change (see
``strategy/book.py``). Without a ``strategies`` section every request gets the built-in
``single`` strategy, exactly as before strategy files existed.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry

from llmroute.config import EMBEDDED, Config, StrategiesConfig
from llmroute.strategy.book import StrategyBook
from llmroute.strategy.handoffs import HandoffStore
from llmroute.strategy.loader import Loader
from llmroute.strategy.protocol import KindContext
from llmroute.strategy.registry import register_builtins
from llmroute.types import Backend


def strategy_dir(config: Config) -> Path | None:
    """The strategies directory: ``strategies.dir``, a relative one read from the config
    file's folder (the embedded default's: the ``llmroute.local`` package); None without a
    ``strategies`` section."""
    if config.strategies is None:
        return None
    path = Path(config.strategies.dir).expanduser()
    if path.is_absolute():
        return path
    if config.source == EMBEDDED:
        return Path(str(importlib.resources.files("llmroute.local"))) / path
    source = Path(config.source)
    return (source.parent if source.is_file() else Path.cwd()) / path


def handoff_store(config: Config) -> HandoffStore:
    """The ``human`` kind's ticket queue at ``strategies.handoffs_path`` (the default path
    without a ``strategies`` section); nothing is opened until first use."""
    strategies = config.strategies
    return HandoffStore(strategies.handoffs_path if strategies is not None
                        else StrategiesConfig.model_fields["handoffs_path"].default)


def lighter_pools(config: Config) -> dict[str, str]:
    """Pool → the lighter pool its degradation tiers name (pools without one left out)."""
    return {pool: tiers.lighter_pool for pool, tiers in config.fuse.degradation.items()
            if tiers.lighter_pool is not None}


def make_loader(config: Config, backends: Mapping[str, Backend],
                handoffs: HandoffStore | None = None) -> Loader:
    """A Loader of the built-in kinds over ``backends``, the config's routing and the
    ``handoffs`` ticket queue (None: the config's, see ``handoff_store``)."""
    ctx = KindContext(backends, config.routing.intents, config.routing.default_pool,
                      config.retry.max_attempts, handoffs or handoff_store(config),
                      config.routing.cross_pool_fallback, lighter_pools(config))
    return Loader(register_builtins(), ctx)


def make_book(config: Config, backends: Mapping[str, Backend], wall_clock: Callable[[], float],
              registry: CollectorRegistry | None = None,
              handoffs: HandoffStore | None = None) -> StrategyBook:
    """The StrategyBook of ``config`` with its files loaded (``human`` strategies queue on
    ``handoffs``); strategies see only the chat backends (an embeddings pool is no chat
    pool to them). Raises ConfigError naming file:line: field for every bad strategy file."""
    chat = {k: b for k, b in backends.items() if b.mode == "chat"}
    loader = make_loader(config, chat, handoffs)
    directory = strategy_dir(config)
    if directory is None:
        return StrategyBook(loader.builtin(), None, wall_clock, registry)
    return StrategyBook(loader.load_dir(directory), lambda: loader.load_dir(directory),
                        wall_clock, registry, str(directory))
