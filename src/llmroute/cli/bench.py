"""``llmroute bench NAME [ARGS…]``: run ``bench/NAME.py`` of the source checkout (for example
``llmroute bench overhead --quick``). The benchmarks ship with the source tree, not with the
installed package: from an installed wheel this command says so and exits 2."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def bench_dir() -> Path | None:
    """The checkout's ``bench/`` folder (``src/llmroute/cli/../../../bench``), or None when this
    package is not running from a source checkout."""
    folder = Path(__file__).resolve().parents[3] / "bench"
    return folder if (folder / "overhead.py").is_file() else None


def available(folder: Path) -> list[str]:
    """Benchmark names in ``folder`` (its ``*.py`` files, without the suffix)."""
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def script_for(name: str, folder: Path | None) -> Path:
    """The script of benchmark ``name``. Raises LookupError with a message naming the
    benchmarks that exist (or saying that there is no source checkout)."""
    if folder is None:
        raise LookupError("benchmarks ship with the source tree: clone the repository and "
                          "run `llmroute bench NAME` from its virtual environment")
    if name not in available(folder):
        raise LookupError(f"no benchmark {name!r}; available: {', '.join(available(folder))}")
    return folder / f"{name}.py"


def run(name: str, args: list[str]) -> int:
    """Replace this process with ``python bench/NAME.py ARGS…``; returns 2 (after a message
    on stderr) when there is no such benchmark."""
    try:
        script = script_for(name, bench_dir())
    except LookupError as exc:
        print(f"llmroute: {exc}", file=sys.stderr)
        return 2
    os.execv(sys.executable, [sys.executable, str(script), *args])
    return 0  # not reached: execv replaces the process
