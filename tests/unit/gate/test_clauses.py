"""gate/clauses.py: an instruction cut at its sequence connectives, and the two intents its
clauses name."""

from __future__ import annotations

from llmroute.gate.clauses import INSTRUCTION_CHARS, clauses, composite_of


def test_an_instruction_is_cut_at_its_connectives():
    assert clauses("Translate this into French and then summarize it in two sentences") == [
        "Translate this into French", "summarize it in two sentences"]
    assert clauses("Solve 3x+5=20, then write a poem about it; finally, rate the poem") == [
        "Solve 3x+5=20", "write a poem about it", "rate the poem"]
    assert clauses("把下面这段话翻译成英文，然后总结要点") == ["把下面这段话翻译成英文", "总结要点"]


def test_pasted_material_after_a_colon_or_a_line_break_is_not_read():
    assert clauses("Summarize this: we met, then we left, and then it rained.") == []
    assert clauses("总结下面的会议记录：先讨论预算，然后讨论招聘。") == []
    assert clauses("Classify the review below\nGreat phone, then it broke.") == []
    assert clauses("x" * INSTRUCTION_CHARS + " then translate it") == []


def test_one_clause_or_fragments_are_not_clauses():
    assert clauses("What is the capital of France?") == []
    assert clauses("then") == []
    assert clauses("so then ok") == []  # pieces under four characters are no clause
    assert clauses("Who ruled the Athenians, and why?") == []  # "then" inside a word: no cut


def test_the_composite_is_two_distinct_named_intents_the_verdicts_first():
    assert composite_of("summarization", ["translation", "summarization"]) == (
        "summarization", "translation")
    assert composite_of("code", ["math", None, "creative_writing"]) == (
        "math", "creative_writing")
    assert composite_of("math", ["math", "math"]) == ()
    assert composite_of("math", ["math", None]) == ()
    assert composite_of("math", ["math", "chat"]) == ()  # a filler clause names no task
