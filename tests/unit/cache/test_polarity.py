"""The polarity guard (``cache/polarity.py``): a negation or the other side of an opposite
pair is the opposite question — refused even at the same vector; a paraphrase that keeps the
question's polarity passes."""

from __future__ import annotations

import pytest
from fakes.cache_pairs import ask, stored

from llmroute.cache.polarity import flipped

OPPOSITE = [
    ("Is it safe to mix bleach and ammonia when cleaning?",
     "Is it unsafe to mix bleach and ammonia when cleaning?"),
    ("Is it safe to eat raw chicken from the fridge?",
     "Is it not safe to eat raw chicken from the fridge?"),
    ("Is Paris big?", "Isn't Paris big?"),
    ("Should I take the left exit after the bridge?", "Should I take the right exit after the bridge?"),
    ("Is Tokyo north of Osaka?", "Is Tokyo south of Osaka?"),
    ("Sort the list in ascending order.", "Sort the list in descending order."),
    ("Is it likely to rain tomorrow in Oslo?", "Is it unlikely to rain tomorrow in Oslo?"),
    ("Is it legal to park here at night?", "Is it illegal to park here at night?"),
    ("混合漂白剂和氨水安全吗？", "混合漂白剂和氨水不安全吗？"),
    ("东京在大阪的北边吗？", "东京在大阪的南边吗？"),
    ("这个数组按升序排列。", "这个数组按降序排列。"),
    ("他来了吗？", "他没来吗？"),
]
SAME = [
    ("What's the capital of France? Answer in one word.",
     "What is the capital of France? Answer in one word."),
    ("Is it safe to mix bleach and ammonia?", "Is mixing bleach and ammonia safe?"),
    ("Why doesn't ice sink in water?", "Why does ice not sink in water?"),
    ("After the war, Lisbon became the capital.", "Lisbon became the capital after the war."),
    ("法国的首都是哪里？", "法国的首都是什么城市？"),
    ("为什么冰不会沉入水中？", "冰为什么不会沉到水里？"),
]


@pytest.mark.parametrize("stored,asked", OPPOSITE, ids=[a for _, a in OPPOSITE])
def test_a_negation_or_the_other_side_of_a_pair_is_flipped(stored, asked):
    assert flipped(stored, asked) and flipped(asked, stored)


@pytest.mark.parametrize("stored,asked", SAME, ids=[a for _, a in SAME])
def test_a_paraphrase_that_keeps_the_polarity_is_not(stored, asked):
    assert not flipped(stored, asked)


async def test_through_the_cache_the_opposite_question_is_a_polarity_miss():
    first = "Is it safe to mix bleach and ammonia when cleaning the bathroom?"
    cache = await stored(first)
    flip = await ask(cache, first.replace("safe", "unsafe"))
    assert (flip.result, flip.reason) == ("miss", "polarity")
    assert (await ask(cache, first.replace("Is it", "Is it really"))).result == "hit-semantic"
