"""YAML text → data with line numbers, and problems → ``file:line: field: message`` lines:
what every configuration file (the router's config, strategy files) reports errors with."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from llmroute.errors import ConfigError

Problem = tuple[tuple[Any, ...], str]
"""``(loc, message)``: a field path (keys and list indices, as pydantic gives them) and what
is wrong there."""


def read_yaml(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """``(data, root node)`` of YAML (or JSON) ``text``; the node gives ``describe`` its
    line numbers. Raises ConfigError ``source:line: invalid YAML: …``."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}:{_yaml_line(exc)}: invalid YAML: {_yaml_problem(exc)}") from exc
    return data, root


def validation_problems(exc: ValidationError) -> list[Problem]:
    """A pydantic ValidationError as ``[(loc, message), …]`` (union/function tags dropped)."""
    return [(_clean_loc(e["loc"]), e["msg"]) for e in exc.errors()]


def describe(problems: list[Problem], root: yaml.Node | None, source: str) -> str:
    """One ``file:line: field: message`` line per problem; ``root`` is ``read_yaml``'s node."""
    lines = []
    for loc, msg in problems:
        field = ".".join(str(p) for p in loc) or "(top level)"
        lines.append(f"{source}:{_line_of(root, loc)}: {field}: {msg}")
    return "\n".join(lines)


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(p for p in loc if not _is_pydantic_tag(p))


def _is_pydantic_tag(part: Any) -> bool:
    return isinstance(part, str) and ("[" in part or part.startswith("function-"))


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """1-based line of the deepest YAML node that ``loc`` reaches (its key for mappings)."""
    line = node.start_mark.line + 1 if node is not None else 1
    for part in loc:
        child = _child(node, part)
        if child is None:
            break
        line, node = child
    return line


def _child(node: yaml.Node | None, part: Any) -> tuple[int, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                return key.start_mark.line + 1, value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        item = node.value[part]
        return item.start_mark.line + 1, item
    return None


def _yaml_line(exc: yaml.YAMLError) -> int:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else 1


def _yaml_problem(exc: yaml.YAMLError) -> str:
    return str(getattr(exc, "problem", None) or exc)
