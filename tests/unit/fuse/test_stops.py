"""Stops cut by the router (``fuse/stops.py``): the earliest stop wins, a stream cut in any
chunking gives the text a JSON answer gets, and only a possible stop is held back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.backends.engines import Quirks
from llmroute.backends.learned import LearnedQuirks
from llmroute.backends.quirks import shaper
from llmroute.fuse.stops import StopCutter, cut, cut_answer, cut_chunk, pending_stops
from llmroute.types import Backend


def backend(quirks: Quirks) -> Backend:
    return Backend("b", "p", "vllm", "http://h:1", "m", 4096, shape=shaper("m", quirks))


@pytest.mark.parametrize("stop,one_stop,pending", [
    (["a", "b", "c"], True, ("b", "c")),
    (["a", "b"], False, None),
    (["a"], True, None),
    ("a", True, None),
    (None, True, None),
    (["a", "", 3], True, None),
], ids=["three-one-stop", "list-taken", "one-item", "string", "none", "junk-rest"])
def test_pending_stops_are_those_the_engine_is_not_sent(stop, one_stop, pending):
    b = backend(Quirks(list_stop=not one_stop))
    assert pending_stops({"stop": stop}, LearnedQuirks(), b) == pending


def test_a_learned_one_stop_quirk_counts_too():
    learned, b = LearnedQuirks(), backend(Quirks())
    assert pending_stops({"stop": ["x", "y"]}, learned, b) is None
    learned.learn(b, {"list_stop": False})
    assert pending_stops({"stop": ["x", "y"]}, learned, b) == ("y",)


def test_cut_finds_the_earliest_of_several_stops():
    assert cut("one two three", ["three", "two"]) == 4
    assert cut("one", ["x"]) is None


def test_a_json_answer_is_cut_per_choice_and_finishes_with_stop():
    answer = {"choices": [
        {"index": 0, "message": {"role": "assistant", "content": "alpha END beta"},
         "finish_reason": "length"},
        {"index": 1, "message": {"role": "assistant", "content": "no stop here"},
         "finish_reason": "length"},
        {"index": 2, "text": "legacy END text", "finish_reason": "length"}]}
    out = cut_answer(answer, ["END"])
    assert out["choices"][0]["message"]["content"] == "alpha "
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["choices"][1] == answer["choices"][1]
    assert out["choices"][2] == {"index": 2, "text": "legacy ", "finish_reason": "stop"}
    assert answer["choices"][0]["message"]["content"] == "alpha END beta"  # not changed


def test_the_cutter_holds_back_only_a_possible_stop():
    cutter = StopCutter(["STOP", "xy"])
    assert cutter.feed("abc ST") == ("abc ", False)  # "ST" may begin STOP
    assert cutter.feed("AR") == ("STAR", False)       # it did not
    assert cutter.feed("x") == ("", False)
    assert cutter.feed("yz") == ("", True)            # "xy" across two chunks
    tail = StopCutter(["STOP"])
    assert tail.feed("the end S") == ("the end ", False)
    assert tail.release() == "S"


def test_a_chunk_is_cut_in_place_and_a_finishing_chunk_releases_what_was_held():
    cutter = StopCutter(["##"])
    first = {"choices": [{"index": 0, "delta": {"content": "a#"}, "finish_reason": None}]}
    assert not cut_chunk(cutter, first, "content")
    assert first["choices"][0]["delta"]["content"] == "a"
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    assert not cut_chunk(cutter, last, "content")
    assert last["choices"][0]["delta"]["content"] == "#"
    hit = {"choices": [{"index": 0, "text": "b##c", "finish_reason": None}]}
    assert cut_chunk(StopCutter(["##"]), hit, "text")
    assert hit["choices"][0] == {"index": 0, "text": "b", "finish_reason": "stop"}


@given(text=st.text("ab#", max_size=40), stops=st.lists(st.text("ab#", min_size=1,
                                                                 max_size=4), min_size=1,
                                                         max_size=3),
       cuts=st.lists(st.integers(0, 40), max_size=8))
def test_any_chunking_gives_the_json_answer_s_text(text, stops, cuts):
    """Fed in any pieces, the client gets exactly the text before the earliest stop."""
    at = cut(text, stops)
    expected = text if at is None else text[:at]
    cutter, got, stopped = StopCutter(stops), "", False
    bounds = sorted({0, len(text), *[c for c in cuts if c <= len(text)]})
    for a, b in zip(bounds, bounds[1:]):
        out, stopped = cutter.feed(text[a:b])
        got += out
        if stopped:
            break
    if not stopped:
        got += cutter.release()
    assert got == expected and stopped == (at is not None)
