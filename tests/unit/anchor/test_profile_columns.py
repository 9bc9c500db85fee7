"""The profile's column path gives exactly the per-backend formula of the module docstring:
clamping, negative weights, NaN or absent as missing, renormalisation, the mid-point; and
``limit`` returns a prefix of the full order."""

from __future__ import annotations

import math

import pytest
from fakes.anchor_ctx import backends, context
from hypothesis import given
from hypothesis import strategies as st

from llmroute.anchor.pickers.argmax import ArgmaxPicker
from llmroute.anchor.profile import Profile, contribution
from llmroute.anchor.scorers import base
from llmroute.anchor.scorers.base import ColumnScorer, memo_column

IDS = ("a", "b", "c", "d")


class MapScorer(base.MapScorer):
    """A scorer that computes only ``score`` (its column laid out by the base): a fixed
    map."""

    def __init__(self, name: str, values: dict[str, float]):
        self.name, self._values = name, values

    def score(self, ctx, candidates):
        return {b.id: self._values[b.id] for b in candidates if b.id in self._values}


class FixedColumn(ColumnScorer):
    """A column scorer over a fixed map (NaN where absent)."""

    def __init__(self, name: str, values: dict[str, float]):
        self.name, self._values = name, values

    def column(self, ctx, candidates):
        return [self._values.get(b.id, math.nan) for b in candidates]


def reference(weights: list[float], maps: list[dict[str, float]], bid: str) -> float:
    """The module docstring's total, one backend at a time."""
    full = sum(abs(w) for w in weights)
    acc = present = 0.0
    for w, m in zip(weights, maps):
        x = m.get(bid, math.nan)
        if not math.isnan(x):
            acc += contribution(w, x)
            present += abs(w)
    if present == 0:
        return sum(weights) / 2
    return acc * full / present


value = st.one_of(st.floats(-0.5, 1.5), st.just(math.nan), st.floats(0, 1))
column = st.dictionaries(st.sampled_from(IDS), value)


@given(st.lists(st.tuples(st.floats(-1, 1).filter(lambda w: abs(w) > 1e-3), column,
                          st.booleans()), min_size=1, max_size=5))
def test_totals_match_the_per_backend_formula(spec):
    scorers = tuple((FixedColumn(f"s{i}", m) if as_column else MapScorer(f"s{i}", m), w)
                    for i, (w, m, as_column) in enumerate(spec))
    profile = Profile((), scorers, ArgmaxPicker())
    totals, parts = profile.score(context(), backends(*IDS))
    weights, maps = [w for w, _, _ in spec], [m for _, m, _ in spec]
    for bid in IDS:
        assert totals[bid] == pytest.approx(reference(weights, maps, bid), abs=1e-9)
    for (s, _), m in zip(scorers, maps):
        assert parts[s.name] == {k: v for k, v in m.items() if not math.isnan(v)}


@given(st.lists(st.tuples(st.floats(0.05, 1), column), min_size=1, max_size=4),
       st.integers(0, 5))
def test_limit_is_a_prefix_of_the_full_order_with_clamped_scores(spec, limit):
    scorers = tuple((FixedColumn(f"s{i}", m), w) for i, (w, m) in enumerate(spec))
    profile = Profile((), scorers, ArgmaxPicker())
    full = profile.rank(context(), backends(*IDS))
    assert profile.rank(context(), backends(*IDS), limit=limit) == full[:limit]
    for c in full:
        assert all(0.0 <= v <= 1.0 for v in c.scores.values())
        bid = c.backend.id
        assert set(c.scores) == {f"s{i}" for i, (_, m) in enumerate(spec)
                                 if bid in m and not math.isnan(m[bid])}


@given(st.lists(st.tuples(st.floats(-1, 1).filter(lambda w: abs(w) > 1e-3),
                          st.dictionaries(st.sampled_from(IDS),
                                          st.one_of(st.floats(0, 1), st.just(math.nan)))),
                min_size=1, max_size=5))
def test_bounded_columns_give_the_same_totals(spec):
    def build(bounded: bool) -> Profile:
        scorers = []
        for i, (w, m) in enumerate(spec):
            s = FixedColumn(f"s{i}", m)
            s.bounded = bounded
            scorers.append((s, w))
        return Profile((), tuple(scorers), ArgmaxPicker())

    plain, _ = build(False).score(context(), backends(*IDS))
    hinted, _ = build(True).score(context(), backends(*IDS))
    assert hinted == pytest.approx(plain, abs=1e-12)


def test_a_memoised_column_is_computed_once_per_decision_and_per_candidate_list():
    calls = []

    def compute(ctx, candidates):
        calls.append(len(candidates))
        return [0.5] * len(candidates)

    ctx, cands = context(), backends(*IDS)
    first = memo_column(ctx, "kv", cands, compute)
    assert memo_column(ctx, "kv", cands, compute) is first and calls == [4]
    memo_column(ctx, "kv", cands[:2], compute)  # another list: computed for it
    memo_column(context(), "kv", cands, compute)  # a new decision: computed again
    assert calls == [4, 2, 4]


def test_a_lone_survivor_is_scored_only_when_explaining():
    profile = Profile((), ((FixedColumn("s", {"a": 0.4, "b": 0.2}), 1.0),), ArgmaxPicker())
    explained = profile.rank(context(), backends("a"))
    assert explained[0].score == pytest.approx(0.4) and explained[0].scores == {"s": 0.4}
    (lone,) = profile.rank(context(), backends("a"), explain=False)
    assert lone.backend.id == "a" and math.isnan(lone.score) and lone.scores == {}
    two = profile.rank(context(), backends("a", "b"), explain=False)  # a choice: scored
    assert [c.backend.id for c in two] == ["a", "b"] and two[0].scores == {"s": 0.4}
