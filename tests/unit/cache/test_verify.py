"""The order verifier (``cache/verify.py``) and the anchors read beside it
(``cache/anchors.py``) on hand-written English and Chinese pairs: a trade of roles is
refused, a clause or name moved as a whole is accepted, and a word that jumps alone is not."""

from __future__ import annotations

import pytest
from fakes.cache_pairs import ask, stored

from llmroute.cache.anchors import Anchors, differs, han_value
from llmroute.cache.verify import Verdict, compare, placed, words

SWAPS = [
    ("Holly was influenced by Elton John.", "Elton John was influenced by Holly."),
    ("Did Brazil beat Germany in the final?", "Did Germany beat Brazil in the final?"),
    ("Which flights go from Boston to Denver?", "Which flights go from Denver to Boston?"),
    ("Why does the cat chase the dog?", "Why does the dog chase the cat?"),
    ("张三为什么打了李四？", "李四为什么打了张三？"),
    ("从北京到上海的火车有几班？", "从上海到北京的火车有几班？"),
]
REORDERS = [
    ("In 1876, he moved to San Diego.", "He moved to San Diego in 1876."),
    ("After the war, Lisbon became the capital.", "Lisbon became the capital after the war."),
    ("From the merger of two councils, the Shawnee Council was born.",
     "The Shawnee Council was born from the merger of two councils."),
    ("1990年春天，他在北京创办了公司。", "他在北京创办了公司，1990年春天。"),
    ("在北京的时候，他创办了这家公司。", "他创办了这家公司，在北京的时候。"),
]
JUMPS = [
    ("The mystic poet wrote of philosophical unity.", "The philosophical poet wrote of mystic unity."),
    ("Sheffield and Hull defeated Stoke before losing.", "Stoke defeated Sheffield and Hull before losing."),
]


def verdict(a: str, b: str) -> Verdict:
    return compare(words(a), words(b))


@pytest.mark.parametrize(("a", "b"), SWAPS)
def test_a_trade_of_roles_is_refused(a, b):
    found = verdict(a, b)
    assert found.breaks >= 2 and not found.in_order()


@pytest.mark.parametrize(("a", "b"), REORDERS)
def test_a_clause_moved_as_a_whole_is_accepted(a, b):
    found = verdict(a, b)
    assert found.breaks == 1 and found.moved >= 2 and found.in_order()
    assert not found.in_order(min_block=0)


@pytest.mark.parametrize(("a", "b"), JUMPS)
def test_a_word_or_name_that_jumps_alone_is_refused(a, b):
    assert not verdict(a, b).in_order()


def test_placed_pairs_each_shared_word_once_and_counts_changed_words():
    assert placed(["a", "b", "c", "d"], ["c", "d", "a", "b"]) == [2, 3, 0, 1]
    assert placed(["a", "b"], ["x", "b", "a", "a"]) == [1, 0]
    assert verdict("one two three four", "one two three five") == Verdict(0, 0.25, 0)


@pytest.mark.parametrize(("a", "b", "ordered", "by_text"), [
    ("Between 1876 and 1887 he lived in 2 towns.", "He lived in 2 towns between 1876 and 1887.",
     "numbers", None),
    ("In Paris, Alice met Bob.", "Alice met Bob in Paris.", "entities", None),
    ("在上海的时候，李明见了王芳。", "李明见了王芳，在上海的时候。", "entities", None),
    ("What is the capital of France?", "What is the capital of Germany?", "entities",
     "entities"),
    ("法国的首都是哪里？", "德国的首都是哪里？", "entities", "entities"),
    ("Convert 5 km to miles.", "Convert 50 km to miles.", "numbers", "numbers"),
    ("Walk 3 miles, then 4 km.", "Walk 3 km, then 4 miles.", "numbers", "numbers"),
])
def test_anchors_by_sequence_or_by_presence(a, b, ordered, by_text):
    stored, asked = Anchors.of(a), Anchors.of(b)
    assert differs(stored, asked) == ordered
    assert differs(stored, asked, (a, b)) == by_text


def test_a_function_word_or_month_after_a_number_is_no_unit():
    assert Anchors.of("in 1887 to Dallas").numbers == ("1887",)
    assert Anchors.of("born 15 May 1978").numbers == ("15", "1978")
    assert Anchors.of("run 5 km, 20% faster").numbers == ("5 km", "20 %")
    assert Anchors.of("3到5个苹果").numbers == Anchors.of("3至5个苹果").numbers == ("3", "5 个")


def test_chinese_numerals_are_read_as_their_value():
    assert [han_value(r) for r in ("八", "二十", "一百零五", "三千五百万", "二零二三", "两")] == [
        8, 20, 105, 35_000_000, 2023, 2]
    assert Anchors.of("他是第八名，二十世纪八十年代。").numbers == Anchors.of(
        "他是第 8 名，20 世纪 80 年代。").numbers == ("8 名", "20 世", "80 年")
    assert Anchors.of("五公里").numbers != Anchors.of("五十公里").numbers


async def test_through_the_cache_a_reorder_is_served_and_a_swap_is_not():
    cache = await stored("In 1990, why did Alice sue Bob in Paris?")
    for asked, expected in (("Why did Alice sue Bob in Paris in 1990?", "hit-semantic"),
                            ("In 1990, why did Bob sue Alice in Paris?", "miss")):
        assert (await ask(cache, asked)).result == expected
