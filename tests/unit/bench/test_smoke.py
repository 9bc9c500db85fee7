"""Every benchmark still runs: ``bench/NAME.py --smoke`` for each script in ``bench/``, found by
listing the folder (a new benchmark is covered when it lands, and must accept ``--smoke``:
``bench/lib/modes.py``). A run passes when it exits 0 with ``RESULT {json object}`` as its
last line; ``SKIP reason`` (data or a tool missing on this machine) skips it with that reason.
The runs go ``PARALLEL`` at a time (most of a smoke run is starting processes and waiting for
them), each in a temporary folder, their plots too (``LLMROUTE_BENCH_RESULTS``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench"
NAMES = sorted(p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_"))
PARALLEL = 3
TIMEOUT_S = 600
TEST = "test_every_benchmark_runs_in_smoke_mode"
pytestmark = pytest.mark.slow


def smoke(name: str, work: Path) -> subprocess.CompletedProcess[str]:
    """``bench/NAME.py --smoke`` in ``work``; its output (a timeout is a failed run). The run
    gets a process group of its own, killed whole on a timeout, so the servers a benchmark
    started do not outlive it."""
    folder = work / name
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "LLMROUTE_BENCH_RESULTS": str(folder)}
    argv = [sys.executable, str(BENCH / f"{name}.py"), "--smoke"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=folder, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return subprocess.CompletedProcess(argv, -1, out, f"timed out after {TIMEOUT_S} s")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future]]:
    """A smoke run of every benchmark this session selected, started at once."""
    wanted = {item.callspec.params["name"] for item in request.session.items
              if getattr(item, "originalname", "") == TEST}
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(PARALLEL) as pool:
        yield {name: pool.submit(smoke, name, Path(tmp)) for name in NAMES if name in wanted}
        pool.shutdown(cancel_futures=True)


def last_line(text: str) -> str:
    """The last non-blank line of ``text``."""
    return next((line for line in reversed(text.splitlines()) if line.strip()), "")


@pytest.mark.parametrize("name", NAMES)
def test_every_benchmark_runs_in_smoke_mode(name: str, runs: dict[str, Future]) -> None:
    done = runs[name].result()
    tail = f"\n--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"bench/{name}.py --smoke exited {done.returncode}{tail}"
    line = last_line(done.stdout)
    if line.startswith("SKIP "):
        pytest.skip(f"bench/{name}.py: {line[5:]}")
    assert line.startswith("RESULT "), f"bench/{name}.py: no RESULT line last{tail}"
    result = json.loads(line[len("RESULT "):])
    assert isinstance(result, dict) and result, f"bench/{name}.py: RESULT is {result!r}"


def test_the_benchmarks_are_found() -> None:
    assert {"decide", "handoff", "overhead", "schedule"} <= set(NAMES)
