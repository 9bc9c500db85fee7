"""Rule overrides from config (``gate.rules``: intent → regexes), applied after the model.

A rule matches when its pattern is found anywhere in the compressed text (case-insensitive,
ASCII word boundaries, as in ``rules``). The first intent in config order with a matching
pattern wins. ``RuleOverrides.replace`` swaps in a new set while serving: the config file's
watcher (``assemble/watch.py``) calls it, through ``SemanticGate.replace_rules``, when a saved
file changes ``gate.rules``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from llmroute.errors import ConfigError
from llmroute.gate.matching import FLAGS

Compiled = tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]


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


class RuleOverrides:
    """The current override rules; ``match`` is pure, ``replace`` swaps them whole;
    ``reloads`` counts the swaps."""

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
