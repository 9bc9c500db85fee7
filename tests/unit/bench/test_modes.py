"""bench/lib/modes.py: the run sizes every benchmark shares, the SKIP line, the results
folder."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[3] / "bench" / "lib"
_spec = importlib.util.spec_from_file_location("bench_modes", LIB / "modes.py")
assert _spec is not None and _spec.loader is not None
modes = sys.modules["bench_modes"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(modes)


@pytest.mark.parametrize(("argv", "size"), [([], "full"), (["--quick"], "quick"),
                                            (["--smoke"], "smoke")],
                         ids=["full", "quick", "smoke"])
def test_the_flag_picks_the_size(argv, size):
    args = modes.parser("x").parse_args(argv)
    assert modes.mode(args) == size
    assert modes.pick(size, "F", "Q", "S") == size[0].upper()


def test_quick_and_smoke_exclude_each_other_and_unknown_sizes_are_refused():
    with pytest.raises(SystemExit):
        modes.parser("x").parse_args(["--quick", "--smoke"])
    with pytest.raises(ValueError, match="not one of"):
        modes.pick("huge", 1, 2, 3)


def test_skip_prints_the_reason_last_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exit_:
        modes.skip("no data at /nowhere")
    assert exit_.value.code == 0
    assert capsys.readouterr().out.splitlines()[-1] == "SKIP no data at /nowhere"


def test_results_go_where_the_environment_says(tmp_path, monkeypatch):
    monkeypatch.setenv(modes.RESULTS_ENV, str(tmp_path / "plots"))
    assert modes.results_dir() == tmp_path / "plots" and (tmp_path / "plots").is_dir()
    monkeypatch.delenv(modes.RESULTS_ENV)
    assert modes.results_dir() == LIB.parent / "results"
