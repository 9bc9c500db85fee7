"""Fixtures for the benchmark scripts' tests."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bench_module() -> Iterator[Callable[[str], ModuleType]]:
    """Imports a script of ``bench/`` by module name, with ``bench/`` on ``sys.path`` while
    the test module runs."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT / "bench"))
        yield importlib.import_module
