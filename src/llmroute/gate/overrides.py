"""Rule overrides from config (``gate.rules``: intent → regexes), applied after the model,
and hot-reloaded when the config file changes (watchfiles).

A rule matches when its pattern is found anywhere in the compressed text (case-insensitive,
ASCII word boundaries, as in ``rules``). The first intent in config order with a matching
pattern wins. ``RuleOverrides.watch(path)`` re-reads the file's ``gate.rules`` on every change;
an invalid file is logged and the previous rules stay in force.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import structlog

from llmroute.errors import ConfigError
from llmroute.gate.matching import FLAGS

Compiled = tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]
Loader = Callable[[Path], Mapping[str, Sequence[str]]]


def compile_overrides(rules: Mapping[str, Sequence[str]], intents: Sequence[str]) -> Compiled:
    """Compile ``rules``. Raises ConfigError naming an unknown intent, a bad regex, or a
    pattern that matches empty text."""
    out = []
    for intent, patterns in rules.items():
        if intent not in intents:
            raise ConfigError(f"gate.rules: unknown intent {intent!r}; known: {', '.join(intents)}")
        out.append((intent, tuple(_compile(intent, p) for p in patterns)))
    return tuple(out)


def _compile(intent: str, pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern, FLAGS)
    except (re.error, TypeError) as err:
        raise ConfigError(f"gate.rules: bad pattern {pattern!r} for {intent!r}: {err}") from err
    if compiled.search("") is not None:
        raise ConfigError(f"gate.rules: pattern {pattern!r} for {intent!r} matches empty text")
    return compiled


def config_rules(path: Path) -> Mapping[str, Sequence[str]]:
    """``gate.rules`` of the config file at ``path``. Raises ConfigError."""
    from llmroute.config import load_config

    return load_config(path).gate.rules


class RuleOverrides:
    """The current override rules; ``match`` is pure, ``watch`` swaps them on file change."""

    def __init__(self, rules: Mapping[str, Sequence[str]], intents: Sequence[str]) -> None:
        self._intents = tuple(intents)
        self._rules = compile_overrides(rules, self._intents)
        self.reloads = 0

    def match(self, text: str) -> str | None:
        """The overriding intent for ``text``, or None."""
        for intent, patterns in self._rules:
            if any(p.search(text) for p in patterns):
                return intent
        return None

    def replace(self, rules: Mapping[str, Sequence[str]]) -> None:
        """Swap in ``rules`` (atomic: a bad set raises ConfigError and keeps the old one)."""
        self._rules = compile_overrides(rules, self._intents)
        self.reloads += 1

    async def watch(self, path: Path, load: Loader = config_rules,
                    stop: asyncio.Event | None = None) -> None:
        """Reload from ``path`` on each change until ``stop`` is set or the task is cancelled."""
        from watchfiles import awatch

        log = structlog.get_logger("llmroute.gate")
        async for _ in awatch(path, stop_event=stop, debounce=200, step=50):
            try:
                self.replace(load(path))
                log.info("gate rules reloaded", path=str(path), reloads=self.reloads)
            except ConfigError as err:
                log.warning("gate rules not reloaded", path=str(path), error=err.message)
