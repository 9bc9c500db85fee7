"""Demo prompt files: request bodies, {prompt}, MT-Bench {turns}; errors name file:line."""

from __future__ import annotations

import json

import pytest

from llmroute.demo.prompts import builtin, load_jsonl
from llmroute.errors import InvalidRequest


def test_three_line_kinds(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("\n".join(json.dumps(o) for o in [
        {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "stream": False},
        {"prompt": "Tell me a joke"},
        {"question_id": 81, "turns": ["First?", "Second?"]},
    ]) + "\n\n")
    convs = load_jsonl(f)
    assert [c.turns for c in convs] == [(), ("Tell me a joke",), ("First?", "Second?")]
    assert convs[0].base["messages"][0]["content"] == "hi" and convs[0].stream is False


@pytest.mark.parametrize(("line", "match"), [("{oops", "p.jsonl:1: not JSON"),
                                             ("[1]", "p.jsonl:1: each line"),
                                             ('{"x": 1}', "p.jsonl:1: expected")],
                         ids=["syntax", "not-object", "no-prompt"])
def test_bad_lines_name_the_line(tmp_path, line, match):
    f = tmp_path / "p.jsonl"
    f.write_text(line)
    with pytest.raises(InvalidRequest, match=match):
        load_jsonl(f)


@pytest.mark.parametrize(("content", "match"), [(None, "No such file"),
                                                (b"\xff\xfe\x00", "utf-8")],
                         ids=["missing", "not-utf8"])
def test_an_unreadable_file_is_named(tmp_path, content, match):
    f = tmp_path / "p.jsonl"
    if content is not None:
        f.write_bytes(content)
    with pytest.raises(InvalidRequest, match=f"p.jsonl: cannot read the prompts file: .*{match}"):
        load_jsonl(f)


def test_builtin_set_covers_the_promised_kinds():
    convs = builtin()
    labels = {c.label for c in convs}
    assert {"code", "math", "summary", "translation", "tool call", "chat"} <= labels
    assert any(len(c.turns) > 1 for c in convs)
    assert any(not c.stream for c in convs) and any(c.stream for c in convs)
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in c.turns[0]) for c in convs)


def test_mt_bench_file_loads_when_present():
    from pathlib import Path
    path = Path(__file__).parents[3] / ".." / "shared" / "data" / "mt-bench" / "question.jsonl"
    if not path.exists():
        pytest.skip("shared MT-Bench data not present")
    convs = load_jsonl(path)
    assert len(convs) == 80 and all(len(c.turns) == 2 for c in convs)
