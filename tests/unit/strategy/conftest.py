"""Shared pieces for the strategy tests: a loader over three pools, and a folder writer."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from llmroute.strategy.loader import Loader
from llmroute.strategy.protocol import KindContext
from llmroute.strategy.registry import register_builtins
from llmroute.types import Backend

BACKENDS = {b.id: b for b in [
    Backend("g1", "general", "vllm", "http://a", "small", 4096),
    Backend("l1", "long", "vllm", "http://c", "big", 32768),
    Backend("c1", "code", "vllm", "http://d", "coder", 8192),
]}


@pytest.fixture
def loader() -> Loader:
    """A Loader of the built-in kinds over pools general (default), long and code."""
    return Loader(register_builtins(), KindContext(BACKENDS, {"summarization": "long"},
                                                   "general", 3))


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """``write(name, text)``: a dedented file in a fresh strategies folder; returns it."""
    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path
    return _write


@pytest.fixture
def strategy_yaml() -> Callable[..., str]:
    """``strategy_yaml(sid, version, priority, pool, when, extra)``: single-kind YAML."""
    return single_yaml


def single_yaml(sid: str, version: float = 1, priority: int = 0, pool: str = "long",
                  when: str = "{}", extra: str = "") -> str:
    """A single-kind strategy file's YAML."""
    return (f"strategy_id: {sid}\nversion: {version}\npriority: {priority}\nkind: single\n"
            f"pool: {pool}\nwhen: {when}\n{extra}")
