"""How big a benchmark run is, the command line every ``bench/NAME.py`` shares, and how a
benchmark that cannot run here says so.

Every benchmark runs in one of three sizes:

* full (no flag): the run whose figures docs/benchmarks.md quotes;
* ``--quick``: under 3 minutes on a 2-core machine, every path measured with fewer requests;
* ``--smoke``: seconds — a handful of requests through the same code path, printing the same
  ``RESULT`` keys. Its figures mean nothing; it shows that the benchmark still runs against
  today's product. ``tests/unit/bench/test_smoke.py`` runs every ``bench/*.py --smoke`` in
  ``make test`` (found by listing the folder, not from a list), so a benchmark that does not
  accept ``--smoke``, or that a product change broke, fails CI.

A benchmark that cannot run on this machine — data under ``../shared/data`` absent, a tool
such as ``redis-server`` not installed — calls ``skip(reason)``: its last line is
``SKIP reason`` and it exits 0; the smoke test reports it as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NoReturn, TypeVar

T = TypeVar("T")
MODES = ("full", "quick", "smoke")
RESULTS_ENV = "LLMROUTE_BENCH_RESULTS"


def parser(description: str | None) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with ``--quick`` and ``--smoke`` (mutually exclusive); read the
    chosen size with ``mode(args)``."""
    return add_sizes(argparse.ArgumentParser(description=description))


def add_sizes(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--quick`` and ``--smoke`` (mutually exclusive) to ``p``; returns ``p``."""
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="fewer requests, every path measured (< 3 min on 2 cores)")
    size.add_argument("--smoke", action="store_true",
                      help="seconds: a handful of requests through the same code path and "
                           "the same RESULT keys; the figures mean nothing")
    return p


def mode(args: argparse.Namespace) -> str:
    """``"smoke"``, ``"quick"`` or ``"full"``, from a ``parser()``'s parsed arguments."""
    return "smoke" if getattr(args, "smoke", False) else \
        "quick" if getattr(args, "quick", False) else "full"


def pick(size: str, full: T, quick: T, smoke: T) -> T:
    """The value for run size ``size`` (one of ``MODES``). Raises ValueError for another."""
    if size not in MODES:
        raise ValueError(f"run size {size!r} is not one of {MODES}")
    return {"full": full, "quick": quick, "smoke": smoke}[size]


def skip(reason: str) -> NoReturn:
    """Print ``SKIP reason`` as the last line and exit 0 (the benchmark cannot run here)."""
    print(f"SKIP {reason}", flush=True)
    raise SystemExit(0)


def results_dir() -> Path:
    """Where plots and other run files go: ``$LLMROUTE_BENCH_RESULTS`` when set (the smoke
    test points it at a temporary folder, so a smoke run leaves the last real run's plots
    alone), else ``bench/results/`` (git-ignored). Created when missing."""
    folder = Path(os.environ.get(RESULTS_ENV) or Path(__file__).resolve().parents[1] / "results")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
