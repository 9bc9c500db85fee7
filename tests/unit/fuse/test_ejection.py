"""Quality ejection: the windows' tallies, the test (Fisher's exact test on bad answers,
Welch's t-test on mean entropies, Page's CUSUM on runs of bad answers) and the state machine with its pool and fleet bounds,
on a fake clock."""

from __future__ import annotations

import math
import random

import pytest
from fakes.clock import FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.fuse.ejection import Ejector, Policy, judge
from llmroute.fuse.quality import QualityTracker, Tally, Window, cusum, tally_of
from llmroute.types import Answer, QualityState

H, P, C, E = (QualityState.HEALTHY, QualityState.PROBING, QualityState.CUT,
              QualityState.EJECTED)
POLICY = Policy(min_answers=20, cut_s=10.0, cooloff_s=30.0, max_cooloff_s=100.0)


def answers(bid: str, n: int, bad: int = 0, at: float = 0.0,
            entropy: float | None = None) -> list[Answer]:
    return [Answer(bid, at, "handoff" if i < bad else None, entropy) for i in range(n)]


def test_a_window_keeps_window_s_seconds_and_window_max_answers():
    w = Window(10.0, 3)
    for t in range(5):
        w.add(Answer("a", float(t), "empty" if t % 2 else None, 1.0))
    assert w.tally.answers == 3 and w.tally.bad == 1 and w.tally.empty == 1
    assert w.trim(14.5).answers == 0 and w.tally == Tally()


def test_tallies_add_across_replicas_and_give_mean_and_sd():
    t = tally_of(Answer("a", 0, None, 1.0)).plus(tally_of(Answer("a", 0, "verify", 3.0)))
    assert (t.answers, t.bad, t.verify, t.mean_entropy) == (2, 1, 1, 2.0)
    assert t.entropy_sd == pytest.approx(2 ** 0.5)
    tracker = QualityTracker()
    tracker.record(answers("a", 4, bad=1))
    tracker.set_remote({"a": list(Tally(6, 3, 3)), "b": list(Tally(2))})
    got = tracker.tallies(0.0)
    assert (got["a"].answers, got["a"].bad, got["b"].answers) == (10, 4, 2)


def test_the_test_needs_min_answers_on_both_sides_and_an_effect():
    bad = Tally(30, 30, 30)
    assert not judge(bad, Tally(19), POLICY).fires  # too few in the pool
    assert not judge(Tally(19, 19, 19), Tally(100), POLICY).fires  # too few of its own
    assert judge(bad, Tally(100, 1, 1), POLICY).fires
    small = judge(Tally(400, 60, 60), Tally(4000, 400, 400), POLICY)  # 15 % vs 10 %
    assert not small.fires and small.evidence["p_bad"] is None  # under the 0.2 floor


def entropic(n: int, mean: float, spread: float = 0.3) -> Tally:
    rng = random.Random(7)
    t = Tally()
    for _ in range(n):
        t = t.plus(tally_of(Answer("x", 0, None, mean + rng.uniform(-spread, spread))))
    return t


def test_the_entropy_test_fires_on_a_backend_whose_answers_turned_uncertain():
    assert judge(entropic(25, 4.2), entropic(200, 1.5), POLICY).fires
    assert not judge(entropic(25, 1.7), entropic(200, 1.5), POLICY).fires  # under 0.5 nats


def test_false_alarms_stay_below_the_stated_rate_on_healthy_pools():
    # 2,000 evaluations of a backend as good as its pool (10 % bad answers, the same
    # entropy): the stated bound is 2·alpha per evaluation (4e-3 in all at 1e-6).
    rng = random.Random(3)
    fired = 0
    for _ in range(2000):
        own, rest = Tally(), Tally()
        for _ in range(rng.randint(20, 120)):
            own = own.plus(tally_of(Answer("a", 0, "empty" if rng.random() < 0.1 else None,
                                           rng.gauss(1.6, 0.4))))
        for _ in range(rng.randint(20, 400)):
            rest = rest.plus(tally_of(Answer("b", 0, "empty" if rng.random() < 0.1 else None,
                                             rng.gauss(1.6, 0.4))))
        fired += judge(own, rest, POLICY).fires
    assert fired == 0


def run(ejector: Ejector, tracker: QualityTracker, t: float) -> list[tuple[str, QualityState]]:
    """One tick; windows of ejected backends reset, as the healing loop does."""
    out = []
    for tr in ejector.evaluate(tracker.tallies(t), t, tracker.runs()):
        if tr.new is E:
            tracker.reset(tr.backend_id)
        out.append((tr.backend_id, QualityState.HEALTHY if tr.refused else tr.new))
    return out


def test_cut_then_ejected_then_probing_then_back_and_a_relapse_doubles_the_cooloff():
    tracker = QualityTracker(window_s=1000.0)
    ej = Ejector(POLICY, {"p": ("a", "b", "c")})
    tracker.record(answers("a", 30, bad=10) + answers("b", 50) + answers("c", 50))
    assert run(ej, tracker, 1.0) == [("a", C)]  # a third bad: worse, not overwhelmingly
    assert ej.views()["a"].share == POLICY.cut_share
    assert run(ej, tracker, 5.0) == []  # still within cut_s
    assert run(ej, tracker, 11.0) == [("a", E)] and ej.views()["a"].share == 0.0
    assert run(ej, tracker, 40.0) == [] and run(ej, tracker, 41.0) == [("a", P)]
    tracker.record(answers("a", 19, at=41.0))
    assert run(ej, tracker, 42.0) == []  # never act on fewer than min_answers
    tracker.record(answers("a", 1, at=41.0))
    assert run(ej, tracker, 43.0) == [("a", H)] and "a" not in ej.views()
    tracker.record(answers("a", 30, bad=10, at=43.0))
    assert run(ej, tracker, 44.0) == [("a", C)]
    assert run(ej, tracker, 54.0) == [("a", E)]
    tracker.record(answers("a", 20, bad=20, at=84.0))
    assert run(ej, tracker, 84.0) == [("a", P)]
    assert run(ej, tracker, 85.0) == [("a", E)]  # the probes were bad: 2 × 30 s now
    assert run(ej, tracker, 144.0) == [] and run(ej, tracker, 145.0) == [("a", P)]


def test_a_cut_whose_test_goes_quiet_comes_back_without_ejection():
    tracker = QualityTracker(window_s=12.0)
    ej = Ejector(POLICY, {"p": ("a", "b", "c")})
    tracker.record(answers("a", 30, bad=10) + answers("b", 50) + answers("c", 50))
    assert run(ej, tracker, 1.0) == [("a", C)]
    tracker.record(answers("a", 30, at=11.0) + answers("b", 30, at=11.0)
                   + answers("c", 30, at=11.0))
    assert run(ej, tracker, 13.0) == [("a", H)]  # the bad answers aged out


def test_a_demotion_that_would_empty_a_pool_is_refused_once_per_stretch():
    tracker = QualityTracker(window_s=1000.0)
    ej = Ejector(POLICY, {"solo": ("a",), "p": ("b", "c")})
    tracker.record(answers("a", 30, bad=30) + answers("b", 40, bad=40) + answers("c", 40))
    events = ej.evaluate(tracker.tallies(1.0), 1.0)
    assert [(e.backend_id, e.new, e.refused) for e in events] == [("b", E, False)]
    both = Ejector(POLICY, {"p": ("b", "c")})
    tracker.record(answers("c", 60, bad=60))  # both bad: one may go, the other stays
    first = both.evaluate({"b": Tally(40, 40, 40), "c": Tally(40, 0)}, 1.0)
    second = both.evaluate({"b": Tally(40, 40, 40), "c": Tally(40, 40, 40)}, 2.0)
    assert [(e.backend_id, e.new) for e in first] == [("b", E)]  # all bad: no cut
    assert second == []  # c is judged against no healthy backend: nothing to compare


def test_the_fleet_bound_holds_across_pools():
    ej = Ejector(Policy(min_answers=20, max_pool_share=1.0, max_fleet_share=0.2),
                 {"p": ("a", "b", "c"), "q": ("d", "e", "f", "g", "h")})
    tallies = {b: Tally(40, 40, 40) if b in "ad" else Tally(40) for b in "abcdefgh"}
    events = ej.evaluate(tallies, 1.0)
    assert [(e.backend_id, e.refused) for e in events] == [("a", False), ("d", True)]
    assert "at most 20% of all backends" in events[1].why


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcde"), st.booleans(), st.floats(0.5, 3.0)),
                min_size=1, max_size=300),
       st.floats(0.1, 1.0), st.floats(0.1, 1.0))
def test_no_pool_is_ever_left_without_a_healthy_backend(events, pool_share, fleet_share):
    ej = Ejector(Policy(min_answers=3, min_gap=0.0, cut_s=1.0, cooloff_s=2.0,
                        max_pool_share=pool_share, max_fleet_share=fleet_share),
                 {"p": ("a", "b", "c"), "q": ("d", "e")})
    tracker, t = QualityTracker(window_s=20.0), 0.0
    for bid, bad, dt in events:
        t += dt
        tracker.record([Answer(bid, t, "handoff" if bad else None)])
        for tr in ej.evaluate(tracker.tallies(t), t):
            if tr.new is E:
                tracker.reset(tr.backend_id)
        for members in ej.pools.values():
            assert any(ej.state(b) is H for b in members)
        demoted = sum(ej.state(b) is not H for b in "abcde")
        assert demoted <= max(int(fleet_share * 5), 0) or demoted == 0


def test_cusum_rises_on_a_run_of_bad_answers_whatever_came_before():
    assert cusum([False] * 500, 0.01, 0.21) == 0.0
    three = cusum([False] * 500 + [True] * 3, 0.002, 0.202)
    assert three == pytest.approx(3 * math.log(0.202 / 0.002))
    assert cusum([True] * 3 + [False] * 5, 0.002, 0.202) == pytest.approx(
        three + 5 * math.log(0.798 / 0.998))


def test_a_backend_with_a_long_good_past_is_demoted_after_a_few_bad_answers_in_a_row():
    # 200 good answers then a few handed off: the window's bad fraction (2 %) is far under
    # the 0.2 floor, so Fisher cannot fire; the CUSUM does (ln(p1/p0) ≈ 4.4 nats a bad
    # answer against a clean pool of 400, h = ln(1e6) ≈ 13.8: the fourth).
    tracker = QualityTracker(window_s=1000.0)
    ej = Ejector(POLICY, {"p": ("a", "b", "c")})
    tracker.record(answers("a", 200) + answers("b", 200) + answers("c", 200))
    assert run(ej, tracker, 1.0) == []
    tracker.record(answers("a", 2, bad=2, at=1.0))
    assert run(ej, tracker, 2.0) == []  # two bad answers are not enough
    tracker.record(answers("a", 2, bad=2, at=2.0))
    verdict = judge(tracker.tallies(3.0)["a"], Tally(400), POLICY, tracker.runs()["a"])
    assert verdict.evidence["p_bad"] is None and verdict.fires
    assert run(ej, tracker, 3.0) == [("a", C)]
    tracker.record(answers("a", 3, bad=3, at=3.0))
    assert run(ej, tracker, 4.0) == [("a", E)]  # overwhelming: out before cut_s


def test_a_probing_backend_is_ejected_again_on_its_first_bad_probes():
    tracker = QualityTracker(window_s=1000.0)
    ej = Ejector(POLICY, {"p": ("a", "b", "c")})
    tracker.record(answers("a", 30, bad=30) + answers("b", 200) + answers("c", 200))
    assert run(ej, tracker, 1.0) == [("a", E)]
    assert run(ej, tracker, 31.0) == [("a", P)]
    tracker.record(answers("a", 2, bad=2, at=31.0))
    assert run(ej, tracker, 32.0) == []
    tracker.record(answers("a", 1, bad=1, at=32.0))
    assert run(ej, tracker, 33.0) == [("a", E)]  # 3 probes, not min_answers (20)


def test_a_healthy_pool_with_ordinary_noise_is_never_demoted_over_an_hour():
    # Six backends as good as each other: 5 % bad answers (handoffs, empty, truncated) and
    # noisy entropies, one answer a second each, judged every second of a fake clock.
    rng = random.Random(11)
    clock = FakeClock(0.0)
    tracker = QualityTracker(window_s=120.0)
    ej = Ejector(Policy(), {"p": tuple("abcdef")})
    moves = []
    for _ in range(3600):
        clock.advance(1.0)
        tracker.record([Answer(b, clock(), rng.choice(("handoff", "empty", "truncated"))
                               if rng.random() < 0.05 else None, rng.gauss(1.2, 0.5))
                        for b in "abcdef"])
        moves += ej.evaluate(tracker.tallies(clock()), clock(), tracker.runs())
    assert moves == []
