"""bench/gate_near_duplicates.py: character 3-gram overlap between utterances and prompts."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def dup(bench_module):
    return bench_module("gate_near_duplicates")


def test_a_reworded_prompt_is_flagged_and_an_unrelated_one_is_not(dup):
    prompts = [("p3", "Explain how a rainbow forms after a storm."),
               ("mt-bench", "用Python写一个快速排序")]
    found = dup.pairs(["Explain how a rainbow forms after the storm!",
                       "What is the capital of Peru?"], prompts, 0.6)
    assert [(origin, text) for _, text, origin, _ in found] == [
        ("p3", "Explain how a rainbow forms after the storm!")]


def test_full_width_and_half_width_text_read_the_same(dup):
    assert dup.grams("１＋２＝？") == dup.grams("1+2=?")


def test_source_tagged_rows_are_not_compared(dup, tmp_path):
    path = tmp_path / "u.jsonl"
    rows = [{"text": "ours", "intent": "chat"},
            {"text": "theirs", "intent": "math", "source": "gsm8k"},
            {"messages": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello"},
                          {"role": "user", "content": "again"}], "intent": "chat"}]
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    texts = dup.utterance_texts(path)
    assert len(texts) == 2 and "ours" in texts[0]
