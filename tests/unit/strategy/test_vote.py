"""The fusion votes' invariants (Hypothesis): a unanimous vote wins whatever the weights,
scaling every weight never changes the winner, a schema-invalid answer never wins."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.strategy.checks import compile_schema
from llmroute.strategy.vote import Ballot, json_vote, normalise, text_vote, winner

ANSWERS = st.sampled_from(["Paris", "paris.", " PARIS! ", "London", "Rome?", "yes", "no"])
WEIGHTS = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
POSITIVE = st.floats(min_value=1e-6, max_value=1e6)
SCALE = st.floats(min_value=1e-3, max_value=1e3)


@given(st.text(max_size=20), st.lists(WEIGHTS, min_size=1, max_size=8))
def test_a_unanimous_vote_wins_whatever_the_weights(answer, weights):
    ballots = [Ballot(answer, w) for w in weights]
    assert normalise(ballots[text_vote(ballots)].answer) == normalise(answer)


@given(st.lists(st.tuples(ANSWERS, POSITIVE), min_size=1, max_size=8), SCALE)
def test_scaling_every_weight_keeps_the_winner(pairs, factor):
    ballots = [Ballot(a, w) for a, w in pairs]
    scaled = [Ballot(a, w * factor) for a, w in pairs]
    assert normalise(ballots[text_vote(ballots)].answer) == \
        normalise(scaled[text_vote(scaled)].answer)


@given(st.lists(st.tuples(st.sampled_from("abc"), POSITIVE), min_size=1, max_size=8), SCALE)
def test_scaling_keeps_the_field_level_winner(pairs, factor):
    ballots = [Ballot({"x": a}, w) for a, w in pairs]
    scaled = [Ballot({"x": a}, w * factor) for a, w in pairs]
    assert json_vote(ballots, lambda v: True) == json_vote(scaled, lambda v: True)


SCHEMA = compile_schema({"type": "object", "required": ["n"],
                         "properties": {"n": {"type": "integer", "maximum": 5}}})
VALUES = st.one_of(st.integers(-3, 9), st.text(max_size=3), st.none())


def _valid(value):
    return not list(SCHEMA.iter_errors(value))


@given(st.lists(st.tuples(st.fixed_dictionaries({"n": VALUES}), WEIGHTS), min_size=1,
                max_size=8))
def test_a_schema_invalid_answer_never_wins(pairs):
    valid = [Ballot(v, w) for v, w in pairs if _valid(v)]
    if not valid:
        return  # the strategy drops invalid answers before voting; none left: no vote
    fused = json_vote(valid, _valid)
    assert _valid(fused)


def test_field_level_votes_resolve_conflicts_by_weight():
    ballots = [Ballot({"city": "Paris", "pop": 2}, 1.0), Ballot({"city": "Paris", "pop": 3},
                                                                1.5),
               Ballot({"city": "Rome", "pop": 2, "extra": True}, 1.2)]
    assert json_vote(ballots, lambda v: True) == {"city": "Paris", "pop": 2}


def test_a_fused_object_failing_its_schema_falls_back_to_a_whole_answer():
    schema = compile_schema({"type": "object", "oneOf": [{"required": ["a"]},
                                                         {"required": ["b"]}]})
    ballots = [Ballot({"a": 1}, 1.0), Ballot({"b": 1}, 1.0), Ballot({"a": 1, "b": 2}, 0.1)]
    assert json_vote(ballots, lambda v: not list(schema.iter_errors(v))) == {"a": 1}
    assert json.dumps(json_vote([Ballot([1, 2], 1.0)], lambda v: True)) == "[1, 2]"


def test_ties_go_to_the_first_answer_and_empty_votes_are_refused():
    assert winner(["x", "y"], [1.0, 1.0]) == ("x", 1.0)
    assert normalise("  Yes!!  ") == "yes"
    with pytest.raises(ValueError):
        text_vote([])
