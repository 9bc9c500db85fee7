"""Outcome files for the win head: a good file reads with the router's token estimates and
qualities in ladder order; every bad one is a ConfigError naming the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmroute.errors import ConfigError
from llmroute.gate.outcomes import MIN_ROWS, data_pools, read_outcomes

DATA = Path(__file__).resolve().parents[2] / "data" / "router_outcomes.jsonl"


def _rows(n: int = MIN_ROWS) -> list[dict[str, object]]:
    return [{"prompt": f"question number {i}", "outcomes": {"small": i % 3 == 0,
                                                              "large": True}}
            for i in range(n)]


def _write(tmp_path: Path, rows: list[object]) -> Path:
    path = tmp_path / "outcomes.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in rows))
    return path


def test_the_shipped_test_file_reads_in_ladder_order() -> None:
    rows = read_outcomes(DATA, ("small", "large"))
    assert len(rows) == 67 and data_pools(DATA) == ("small", "large")
    assert all(r.quality[1] == 1.0 for r in rows)
    assert {r.quality[0] for r in rows} == {0.0, 1.0}
    multi = next(r for r in rows if r.request.body.get("messages", [{}])[0].get("content")
                 == "Hi there")
    assert multi.request.prompt_tokens > 0 and multi.line == 4


def test_scores_map_onto_zero_to_one_and_ties_count_as_well_enough(tmp_path: Path) -> None:
    rows = [{"prompt": f"p{i}", "outcomes": {"a": 1 + i % 10, "b": 5.5}} for i in range(60)]
    got = read_outcomes(_write(tmp_path, rows), ("a", "b"))
    assert got[0].quality == (0.0, 0.5) and got[9].quality == (1.0, 0.5)


@pytest.mark.parametrize(("change", "message"), [
    (lambda rows: rows[4]["outcomes"].pop("large"), ":5: outcomes.large: missing"),
    (lambda rows: rows[6]["outcomes"].update(small="yes"), ":7: outcomes.small: \"yes\" is"),
    (lambda rows: rows[2]["outcomes"].update(large=11), ":3: outcomes.large: a score here"),
    (lambda rows: rows.__setitem__(8, {"outcomes": {"small": True, "large": True}}),
     ":9: prompt: need a non-empty"),
    (lambda rows: rows.__setitem__(1, "{not json"), ":2: not JSON"),
    (lambda rows: rows.__setitem__(0, [1, 2]), ":1: a row is one JSON object"),
])
def test_bad_rows_name_their_line_and_field(tmp_path: Path, change, message: str) -> None:
    rows: list = _rows(60)
    change(rows)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        read_outcomes(_write(tmp_path, rows), ("small", "large"))


def test_a_score_out_of_range_names_its_line(tmp_path: Path) -> None:
    rows = [{"prompt": f"p{i}", "outcomes": {"a": 3, "b": 0 if i == 7 else 9}}
            for i in range(60)]
    with pytest.raises(ConfigError, match=r":8: outcomes.b: score 0 is outside 1–10"):
        read_outcomes(_write(tmp_path, rows), ("a", "b"))


def test_too_few_rows_and_one_class_only_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"49 row\\(s\\); the win head needs at least "
                                          f"{MIN_ROWS}"):
        read_outcomes(_write(tmp_path, _rows(49)), ("small", "large"))
    same = [{"prompt": f"p{i}", "outcomes": {"small": True, "large": True}}
            for i in range(60)]
    with pytest.raises(ConfigError, match="outcomes.small: on every row small answers as "
                                          "well as large: one class only"):
        read_outcomes(_write(tmp_path, same), ("small", "large"))
