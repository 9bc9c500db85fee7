"""The n-gram head: CJK-aware word tokens, and the fast prediction path giving the same
probabilities as the normalised, stacked design matrix it was fitted on."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.gate.head import WORD_TOKENS, NgramHead
from llmroute.gate.probs import softmax

EXAMPLES = [("write a python function to sort a list", "code"),
            ("用Python写一个排序函数", "code"),
            ("fix this java null pointer exception", "code"),
            ("这段代码为什么报错", "code"),
            ("translate good morning into french", "translation"),
            ("把这句话翻译成英文", "translation"),
            ("how do you say thank you in japanese", "translation"),
            ("中译英：今天天气很好", "translation"),
            ("what is the capital of peru", "open_qa"),
            ("长城有多长？", "open_qa"),
            ("who wrote the odyssey", "open_qa"),
            ("什么是光合作用？", "open_qa")]


@pytest.fixture(scope="module")
def head() -> NgramHead:
    return NgramHead().fit([t for t, _ in EXAMPLES], [i for _, i in EXAMPLES])


@pytest.mark.parametrize(("text", "tokens"), [
    ("Write a sort", ["Write", "a", "sort"]),
    ("用Python写函数", ["用", "Python", "写", "函", "数"]),
    ("翻译成日语：おはよう", ["翻", "译", "成", "日", "语", "お", "は", "よ", "う"]),
    ("v2 ok_go 3.5", ["v2", "ok_go", "3", "5"]),
], ids=["english", "chinese-with-latin", "japanese", "digits-underscore"])
def test_word_tokens_split_cjk_into_characters(text: str, tokens: list[str]) -> None:
    assert re.findall(WORD_TOKENS, text) == tokens


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=60), min_size=1, max_size=4))
def test_fast_path_matches_the_fitted_design_matrix(head: NgramHead, texts: list[str]) -> None:
    expected = softmax((head.features(texts) @ head.weights + head.bias) / head.temperature)
    got = head.proba(texts)
    assert got.shape == (len(texts), len(head.classes))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_the_head_predicts_what_it_was_fitted_on(head: NgramHead) -> None:
    p = head.proba(["用Java写一个排序函数", "translate this into french"])
    assert [head.classes[i] for i in p.argmax(axis=1)] == ["code", "translation"]


def test_two_intents_give_two_columns() -> None:
    two = [(t, i) for t, i in EXAMPLES if i in ("code", "translation")]
    head = NgramHead().fit([t for t, _ in two], [i for _, i in two])
    p = head.proba(["写一个Python函数", "translate into german please"])
    assert p.shape == (2, 2)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert [head.classes[i] for i in p.argmax(axis=1)] == ["code", "translation"]
