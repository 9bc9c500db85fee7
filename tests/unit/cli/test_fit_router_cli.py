"""``llmroute gate fit-router --data FILE``: a hand-written outcome file fitted once, then
found already fitted; a bad file is one error naming its line and field, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmroute.cli.main import main

DATA = Path(__file__).resolve().parents[2] / "data" / "router_outcomes.jsonl"
CONFIG = """\
pools: {small: {}, large: {}}
backends:
  - {id: s, pool: small, engine: vllm, base_url: "http://127.0.0.1:9"}
  - {id: l, pool: large, engine: vllm, base_url: "http://127.0.0.1:9"}
routing: {default_pool: small}
gate: {encoder: false, cache_dir: CACHE}
"""


def _config(tmp_path: Path) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG.replace("CACHE", str(tmp_path / "heads")), encoding="utf-8")
    return str(path)


@pytest.mark.slow
def test_fit_router_fits_once_then_finds_the_head(tmp_path, capsys):
    """Slow: fits the gate's intent heads in a fresh folder first (seconds)."""
    args = ["gate", "fit-router", "--data", str(DATA), "--pools", "small,large",
            "--config", _config(tmp_path)]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    second = capsys.readouterr().out
    assert "win head for small < large" in first and "fitted in" in first
    assert "(67 rows; key " in first and "already fitted" in second
    assert "small: out-of-fold probability of answering as well as large: p10" in second
    assert "serve with it: gate.router: {data: " in second
    assert len(list((tmp_path / "heads").glob("win-*.npz"))) == 1


def test_a_bad_outcome_file_is_one_error_naming_line_and_field(tmp_path, capsys):
    data = tmp_path / "o.jsonl"
    rows = [{"prompt": f"q{i}", "outcomes": {"small": i % 2 == 0, "large": True}}
            for i in range(60)]
    rows[11]["outcomes"]["small"] = "sometimes"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code = main(["gate", "fit-router", "--data", str(data), "--pools", "small,large",
                 "--config", _config(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"{data}:12: outcomes.small: \"sometimes\" is neither a flag" in err
    assert not list((tmp_path / "heads").glob("win-*.npz"))


def test_a_ladder_of_one_pool_is_refused(tmp_path, capsys):
    code = main(["gate", "fit-router", "--data", str(DATA), "--pools", "small",
                 "--config", _config(tmp_path)])
    assert code == 2 and "--pools: need at least two different pools" in capsys.readouterr().err
