"""Loading a directory of strategy files (``*.yaml``, ``*.yml``, ``*.json``; one strategy a
file) into Entries, with every problem as ``file:line: field: message``.

A file is read with the config's YAML machinery (``config.read_yaml``/``describe``; a JSON
file's tabs become spaces first, which YAML would refuse), validated against its kind's
model, its pools checked, and its kind's strategy built. Across files: duplicate ids, a
``fallback_strategy`` naming nothing, and a cycle of ``fallback_strategy`` are refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llmroute.config.yaml import Problem, describe, read_yaml, validation_problems
from llmroute.errors import ConfigError
from llmroute.strategy.protocol import KindContext
from llmroute.strategy.registry import KindRegistry
from llmroute.strategy.single import SingleStrategy
from llmroute.strategy.snapshot import BUILTIN_ID, Entry, StrategySet
from llmroute.strategy.spec import StrategySpec
from llmroute.strategy.split import TRIAL_KINDS

SUFFIXES = (".yaml", ".yml", ".json")


class Loader:
    """Reads strategy files of ``registry``'s kinds and builds them over ``ctx``."""

    def __init__(self, registry: KindRegistry, ctx: KindContext):
        self._registry = registry
        self._ctx = ctx
        self._pools = {b.pool for b in ctx.backends.values()} | {ctx.default_pool}

    def builtin(self) -> StrategySet:
        """The set with no loaded strategy: every request gets the built-in ``single``."""
        ctx = self._ctx
        spec = StrategySpec(strategy_id=BUILTIN_ID, version=0, kind="single",
                            description="the config's routing (no strategy file matched)")
        strategy = SingleStrategy(ctx.backends, ctx.intents, ctx.default_pool,
                                  ctx.max_attempts, cross_pool=ctx.cross_pool_fallback,
                                  lighter=ctx.lighter_pools)
        routable = {"auto", *self._pools, *(b.model for b in ctx.backends.values())}
        return StrategySet((), Entry.of(spec, "<built-in>", None, strategy), routable)

    def load_dir(self, directory: Path) -> StrategySet:
        """Every strategy file in ``directory`` (not its subfolders), as a StrategySet.
        Raises ConfigError listing every problem, one ``file:line: field: message`` a line."""
        entries, errors = [], []
        for path in strategy_files(directory):
            try:
                entries.append(self.read(path))
            except ConfigError as exc:
                errors.append(exc.message)
        errors = errors or cross_problems(entries)
        if errors:
            raise ConfigError("\n".join(errors))
        return self.builtin().replaced(entries)

    def read(self, path: Path) -> Entry:
        """One strategy file as an Entry. Raises ConfigError naming file:line: field."""
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}:1: cannot read strategy file: {exc}") from exc
        return self.parse(text.replace("\t", " ") if path.suffix == ".json" else text, source)

    def parse(self, text: str, source: str) -> Entry:
        """One strategy's YAML or JSON ``text``; ``source`` names it in messages. Raises
        ConfigError naming file:line: field."""
        data, root = read_yaml(text, source)
        if not isinstance(data, dict):
            raise ConfigError(f"{source}:1: a strategy file holds one mapping")
        kind = self._registry.get(data.get("kind"))
        if kind is None:
            known = ", ".join(self._registry.names)
            raise ConfigError(describe([(("kind",), f"unknown kind {data.get('kind')!r} "
                                         f"(known: {known})")], root, source))
        try:
            spec = kind.spec.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(describe(validation_problems(exc), root, source)) from exc
        problems = [(loc, f"unknown pool {pool!r} (pools: {', '.join(sorted(self._pools))})")
                    for loc, pool in spec.pool_refs() if pool not in self._pools]
        if problems:
            raise ConfigError(describe(problems, root, source))
        return Entry.of(spec, source, root, kind.build(spec, self._ctx))


def strategy_files(directory: Path) -> list[Path]:
    """The strategy files in ``directory``, sorted by name. Raises ConfigError when it is
    not a readable directory."""
    try:
        return sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES and p.is_file())
    except OSError as exc:
        raise ConfigError(f"{directory}: cannot read the strategies directory: {exc}") from exc


def cross_problems(entries: Sequence[Entry]) -> list[str]:
    """Problems between files: a duplicate ``strategy_id``, a ``fallback_strategy`` that
    names no strategy, a cycle of ``fallback_strategy``. One message a problem."""
    by_id: dict[str, Entry] = {}
    out: list[str] = []
    for e in entries:
        first = by_id.setdefault(e.spec.strategy_id, e)
        if first is not e:
            out.append(_at(e, ("strategy_id",), f"duplicate strategy id "
                           f"{e.spec.strategy_id!r} (also in {first.source})"))
    for e in entries:
        target = e.spec.fallback_strategy
        if target is not None and target != BUILTIN_ID and target not in by_id:
            out.append(_at(e, ("fallback_strategy",), f"unknown strategy {target!r}"))
        out.extend(_arm_problems(e, by_id))
    return out or list(_cycles(by_id))


def _arm_problems(e: Entry, by_id: dict[str, Entry]) -> Iterable[str]:
    """A split's or shadow's arm naming itself, no loaded strategy, or another split."""
    for loc, target in e.spec.strategy_refs():
        arm = by_id.get(target)
        if target == e.spec.strategy_id:
            yield _at(e, loc, f"an arm names the {e.spec.kind} strategy itself")
        elif arm is None:
            yield _at(e, loc, f"unknown strategy {target!r}")
        elif arm.spec.kind in TRIAL_KINDS:
            yield _at(e, loc, f"strategy {target!r} is a {arm.spec.kind} itself; an arm "
                      "must serve requests")


def _cycles(by_id: dict[str, Entry]) -> Iterable[str]:
    """One message per strategy that starts a ``fallback_strategy`` cycle it is part of."""
    for start, entry in by_id.items():
        path, current = [start], entry.spec.fallback_strategy
        while current in by_id and current not in path:
            path.append(current)
            current = by_id[current].spec.fallback_strategy
        if current == start:
            chain = " → ".join([*path, start])
            yield _at(entry, ("fallback_strategy",), f"fallback_strategy cycle: {chain}")


def _at(entry: Entry, loc: tuple[Any, ...], message: str) -> str:
    problem: Problem = (loc, message)
    return describe([problem], entry.root, entry.source)
