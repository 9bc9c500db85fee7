"""``llmroute strategy schema`` and ``llmroute strategy check`` (a rules gate: quick)."""

from __future__ import annotations

import json
import textwrap

import pytest

from llmroute.cli.main import main

CONFIG = """\
pools: {general: {}, long: {}}
backends:
  - {id: g, pool: general, engine: vllm, base_url: "http://127.0.0.1:9"}
  - {id: l, pool: long, engine: vllm, base_url: "http://127.0.0.1:9", model: big}
routing: {default_pool: general}
gate: {kind: rules, rules: {summarization: ["(?i)summari[sz]e"]}}
"""

DOCS = """\
strategy_id: docs
version: 1
when: {intents: [summarization]}
kind: single
pool: long
"""


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "config.yaml").write_text(CONFIG, encoding="utf-8")
    folder = tmp_path / "strategies"
    folder.mkdir()
    (folder / "docs.yaml").write_text(DOCS, encoding="utf-8")
    return tmp_path / "config.yaml", folder


def queries(tmp_path, *rows):
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_schema_prints_the_json_schema(capsys):
    assert main(["strategy", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "llmroute strategy" and "when" in schema["properties"]


def test_check_passes_a_good_directory_and_expectations(setup, capsys, tmp_path):
    cfg, folder = setup
    q = queries(tmp_path, {"prompt": "Summarize this", "expect": "docs"},
                {"prompt": "hi", "expect": "builtin-single"},
                {"messages": [{"role": "user", "content": "summarise it"}], "expect": "docs"},
                {"prompt": "x", "repeat": 100000})
    assert main(["strategy", "check", str(folder), "--config", str(cfg), "--queries", q]) == 0
    out = capsys.readouterr().out
    assert "1 strategy OK: docs@1" in out and "all queries OK" in out
    assert "q.jsonl:4: " in out and "25000 tokens)" in out


def test_check_fails_a_wrong_expectation(setup, capsys, tmp_path):
    cfg, folder = setup
    q = queries(tmp_path, {"prompt": "hello", "expect": "docs"}, "not an object")
    assert main(["strategy", "check", str(folder), "--config", str(cfg), "--queries", q]) == 1
    out = capsys.readouterr().out
    assert "q.jsonl:1: builtin-single@0 (intent chat, 1 tokens) FAIL (expected docs)" in out
    assert "q.jsonl:2: unusable query" in out and "2 failed" in out


def test_check_names_file_line_field_and_exits_1(setup, capsys):
    cfg, folder = setup
    (folder / "bad.yaml").write_text(textwrap.dedent("""\
        strategy_id: bad
        version: 1
        kind: single
        pool: nowhere
        """), encoding="utf-8")
    assert main(["strategy", "check", str(folder), "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert f"{folder}/bad.yaml:4: pool: unknown pool 'nowhere'" in err


def test_the_shipped_strategies_load_against_the_embedded_default(capsys):
    from llmroute.assemble.strategies import strategy_dir
    from llmroute.config import load_config

    folder = strategy_dir(load_config())
    assert folder is not None
    assert main(["strategy", "check", str(folder)]) == 0
    assert "11 strategies OK" in capsys.readouterr().out
