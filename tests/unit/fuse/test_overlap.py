"""The seam's rule for text a fallback repeats (``fuse/overlap.py``), alone and through the
seam with any chunking."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from llmroute.fuse.overlap import MIN_OVERLAP, new_text, pending, tail_overlap
from llmroute.fuse.seam import Seam

PRIOR = "The capital of France is"


@pytest.mark.parametrize(("held", "out"), [
    ("The capital of France is Paris.", " Paris."),     # restart: the whole prior
    ("France is Paris.", " Paris."),                    # the last words repeated
    (" of France is Paris.", " Paris."),
    (" Paris.", " Paris."),                             # a real continuation
    ("is Paris.", "is Paris."),                         # under MIN_OVERLAP characters
    ("ance is Paris.", "ance is Paris."),               # not at a word boundary
    ("The French capital is Paris.", "The French capital is Paris."),  # other words
], ids=["restart", "tail", "longer-tail", "continuation", "short", "mid-word", "reworded"])
def test_what_a_restarting_fallback_has_dropped(held, out):
    assert new_text(held, "", PRIOR) == out


def test_an_echo_alone_is_cut_exactly_and_never_searched_for_a_tail():
    assert new_text("Red, green", "Red", "") == ", green"
    assert new_text("een, blue", "Red, green", "") == "een, blue"
    assert not pending("een", "Red, green", "")


@pytest.mark.parametrize(("held", "waits"), [
    ("The capital", True), ("France", True), ("France is", False), (" Paris", False),
    ("of", True), ("is", False),
], ids=["restart-so-far", "tail-so-far", "tail-whole", "continuation", "in-tail", "too-late"])
def test_text_is_held_only_while_it_may_still_be_a_repeat(held, waits):
    assert pending(held, "", PRIOR) is waits


def test_a_fallback_that_only_repeats_sends_nothing_at_its_end():
    assert new_text("The capital", "", PRIOR, final=True) == ""
    assert new_text("The capital", "", PRIOR) == "The capital"


words = st.lists(st.sampled_from(["the", "cat", "sat", "on", "a", "mat", "and", "slept"]),
                 min_size=1, max_size=12).map(" ".join)


def chunk(text: str = "", finish: str | None = None) -> dict:
    delta = {"content": text} if text else {}
    return {"id": "a", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def through_seam(prior: str, fallback: str, size: int) -> str:
    seam = Seam("chat", None)
    sent = [seam.rewrite(chunk(prior), 0)]
    seam.hand_off({"from": "x", "to": "y", "reason": "cut"}, "", restarts=True)
    pieces = [fallback[i:i + size] for i in range(0, len(fallback), size)]
    sent += [seam.rewrite(chunk(p), 1) for p in pieces] + [seam.rewrite(chunk(finish="stop"), 2)]
    return "".join((c["choices"][0]["delta"].get("content") or "") for c in sent if c)


@given(words, words, st.integers(1, 7))
def test_a_restart_reads_as_one_answer_however_it_is_chunked(prior, rest, size):
    assert through_seam(prior, prior + " " + rest, size) == prior + " " + rest


@given(words, words, st.integers(1, 7))
def test_a_continuation_that_repeats_nothing_passes_unchanged(prior, rest, size):
    cont = " " + rest
    assume(tail_overlap(prior, cont) == 0 and not cont.startswith(prior))
    assume(not (prior + " ").startswith(cont))  # a continuation that only repeats
    assert through_seam(prior, cont, size) == prior + cont


@given(words, st.lists(st.sampled_from(["cat", "sat", "mat", "slept"]), min_size=3,
                      max_size=4).map(" ".join), words, st.integers(1, 7))
def test_a_repeated_tail_is_dropped_however_it_is_chunked(head, tail, rest, size):
    """Chunking never changes the outcome: the client reads the prior text and then what the
    rule keeps of the fallback's whole text (here at least the repeated ``tail``)."""
    prior, fallback = head + " " + tail, tail + " " + rest
    kept = new_text(fallback, "", prior, final=True)
    assert len(kept) <= len(" " + rest)
    assert through_seam(prior, fallback, size) == prior + kept
