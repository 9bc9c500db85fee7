"""``llmroute bench NAME``: finds the checkout's benchmarks, refuses unknown names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmroute.cli.bench import available, bench_dir, script_for
from llmroute.cli.main import main

ROOT = Path(__file__).resolve().parents[3]


def test_finds_the_checkouts_bench_folder():
    folder = bench_dir()
    assert folder == ROOT / "bench"
    assert {"overhead", "handoff", "decide"} <= set(available(folder))
    assert script_for("overhead", folder) == ROOT / "bench" / "overhead.py"


@pytest.mark.parametrize(("name", "folder", "words"),
                         [("nope", ROOT / "bench", "available: "),
                          ("overhead", None, "source tree")], ids=["unknown", "no-checkout"])
def test_refuses_with_a_message(name, folder, words):
    with pytest.raises(LookupError, match=words):
        script_for(name, folder)


def test_unknown_benchmark_exits_2(capsys):
    assert main(["bench", "nope"]) == 2
    assert "available: " in capsys.readouterr().err


def test_runs_the_script_with_its_arguments():
    out = subprocess.run([sys.executable, "-m", "llmroute.cli.main", "bench", "decide", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--quick" in out.stdout
