"""Rule overrides from config (``gate.rules``: intent → regexes), applied after the model,
and hot-reloaded when the config file changes (watchfiles).

A rule matches when its pattern is found anywhere in the compressed text (case-insensitive,
ASCII word boundaries, as in ``rules``). The first intent in config order with a matching
pattern wins.

Hot reload (``RuleOverrides.watch(path)``): the watcher watches the file's *directory* (not
recursively) and keeps the events that name the file — plus Kubernetes ConfigMap swaps,
whose ``..data`` link is replaced — so an editor's or ConfigMap's atomic-rename save
(write a temporary file, ``rename`` it over the old one) is seen every time: a watch on the
file itself follows the old inode and goes blind after the first such save. On each change
whose content differs, the whole file is loaded and validated and compared with the last
version: ``gate.rules`` is applied at once (``applied``); every other setting that changed
(``routing``, ``timeouts``, ``gate.cache_ttl_s``, …) is named as needing a restart
and not applied: ``pools``, ``backends`` and ``routing`` as waiting for a reload
(``needs_reload``: ``llmroute reload``, ``SIGHUP`` or ``POST /admin/reload`` applies them,
``assemble/reload.py``), the rest as needing a restart (``needs_restart``). One log line
says which: ``config_reloaded`` (info) when something was applied,
``config_change_needs_reload`` (info) when only reloadable sections changed,
``config_change_needs_restart`` (warning) when a change needs a restart; an invalid file
is logged (``config_not_reloaded``) and everything stays as it was.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from llmroute.config import RELOADED_SECTIONS, Config, load_config
from llmroute.errors import ConfigError
from llmroute.gate.matching import FLAGS

Compiled = tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]
Loader = Callable[[Path], Config]
"""Loads and validates the config file (``config.load_config``); raises ConfigError."""
_log = structlog.get_logger("llmroute.gate")
APPLIED = frozenset({"gate.rules"})
"""The settings a running router applies from a changed file; the rest need a restart."""


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


def config_changes(old: Config, new: Config) -> list[str]:
    """Dotted names of the settings that differ between ``old`` and ``new``: a top-level
    section (``routing``, ``timeouts``, …), or for ``gate`` its fields (``gate.rules``, …).
    ``source`` (the file name) is not a setting."""
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


def _digest(path: Path) -> bytes | None:
    """The file's content hash; None when it cannot be read (mid-replace, removed)."""
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


def _ours(path: Path) -> Callable[[Any, str], bool]:
    """watchfiles filter: events on ``path``'s name, or a ConfigMap ``..data`` swap."""
    name = path.name
    return lambda _change, changed: (n := Path(changed).name) == name or n.startswith("..")


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

    async def watch(self, path: Path, load: Loader = load_config,
                    stop: asyncio.Event | None = None) -> None:
        """Follow ``path`` (module docstring) until ``stop`` is set or the task is cancelled:
        apply each saved change to ``gate.rules``, log what was applied and what needs a
        restart. Never raises for a bad file; a lost directory watch is re-armed."""
        from watchfiles import awatch

        path = Path(path).absolute()
        state = _Seen(_digest(path), _try_load(path, load))
        while stop is None or not stop.is_set():
            try:
                async for _ in awatch(path.parent, watch_filter=_ours(path), stop_event=stop,
                                      debounce=200, step=50, recursive=False):
                    self._changed(path, load, state)
                return
            except OSError as err:  # the directory went away: wait, then watch it again
                _log.warning("config_watch_lost", path=str(path), error=str(err))
                await asyncio.sleep(1.0)

    def _changed(self, path: Path, load: Loader, state: _Seen) -> None:
        """One batch of events: reload when the content changed, and log the outcome."""
        digest = _digest(path)
        if digest is None or digest == state.digest:
            return
        try:
            new = load(path)
            # no earlier version to compare with: apply the rules, flag everything else
            changed = config_changes(state.config, new) if state.config is not None \
                else ["gate.rules", "*"]
            if "gate.rules" in changed:
                self.replace(new.gate.rules)
        except ConfigError as err:
            _log.warning("config_not_reloaded", path=str(path), error=err.message)
            return
        state.digest, state.config = digest, new
        _report(path, changed, self.reloads)


class _Seen:
    """The watcher's last accepted version of the file: content hash and config."""

    def __init__(self, digest: bytes | None, config: Config | None) -> None:
        self.digest = digest
        self.config = config


def _try_load(path: Path, load: Loader) -> Config | None:
    try:
        return load(path)
    except ConfigError:
        return None


def _report(path: Path, changed: list[str], reloads: int) -> None:
    applied = [c for c in changed if c in APPLIED]
    reload = [c for c in changed if c in RELOADED_SECTIONS]
    restart = [c for c in changed if c not in APPLIED and c not in RELOADED_SECTIONS]
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

