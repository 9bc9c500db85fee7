"""The cascade's start from the gate's win head: the cheapest pool of a ladder whose win
probability (or rank) clears the bar; a pool the head does not judge ends the climb; with no
bar the head's answer changes nothing; ``describe`` shows the head's answer."""

from __future__ import annotations

import pytest

from llmroute.strategy.cascade import CascadeSpec, build_cascade
from llmroute.strategy.protocol import KindContext
from llmroute.types import Backend, ChatRequest, Intent, Win

POOLS = ("tiny", "mid", "big")
BACKENDS = {b.id: b for b in [Backend(f"{p}1", p, "vllm", f"http://{p}", p, 4096)
                              for p in POOLS]}
REQUEST = ChatRequest("chat", {"messages": []}, "auto", False, "q", 5, None, "r")


def _start(escalate: dict[str, object], wins: tuple[Win, ...], complexity: float = 1.0):
    spec = CascadeSpec.model_validate({"strategy_id": "c", "version": 1, "kind": "cascade",
                                       "pools": list(POOLS), "escalate": escalate})
    strategy = build_cascade(spec, KindContext(BACKENDS, {}, "tiny", 3))
    intent = Intent("general", 0.9, complexity=complexity, wins=wins)
    return strategy.start_on(REQUEST, intent, lambda request, pool: 1.0), \
        strategy.describe(REQUEST, intent, lambda request, pool: 1.0)


LADDER = (Win("tiny", 0.2, 0.1), Win("mid", 0.7, 0.6))


@pytest.mark.parametrize("escalate,wins,start,reasons", [
    ({"win_probability_at_least": 0.5}, LADDER, 1, ["pool tiny: win probability 0.2 < 0.5"]),
    ({"win_probability_at_least": 0.1}, LADDER, 0, []),
    ({"win_probability_at_least": 0.8}, LADDER, 2,
     ["pool tiny: win probability 0.2 < 0.8", "pool mid: win probability 0.7 < 0.8"]),
    ({"win_rank_at_least": 0.5}, LADDER, 1, ["pool tiny: win rank 0.1 < 0.5"]),
    ({"win_probability_at_least": 0.5}, (), 0, []),
    ({"win_probability_at_least": 0.5}, (Win("tiny", 0.2, 0.1),), 1,
     ["pool tiny: win probability 0.2 < 0.5"]),
    ({}, LADDER, 0, []),
], ids=["to-mid", "stays", "to-big", "rank", "no-head", "mid-unjudged", "no-bar"])
def test_the_cheapest_pool_that_clears_the_bar_is_the_start(escalate, wins, start, reasons):
    (index, why), described = _start(escalate, wins)
    assert (index, why) == (start, reasons)
    assert described["start"] == POOLS[start]
    assert described["wins"] == [w._asdict() for w in wins]


def test_complexity_still_lifts_a_start_the_head_left_on_the_cheapest_pool():
    (index, why), _ = _start({"win_probability_at_least": 0.1, "complexity_above": 2.0},
                             LADDER, complexity=3.0)
    assert (index, why) == (1, ["complexity 3 > 2"])
    (index, why), _ = _start({"win_probability_at_least": 0.8, "complexity_above": 2.0},
                             LADDER, complexity=3.0)
    assert index == 2 and len(why) == 2


def test_a_bar_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="win_probability_at_least"):
        CascadeSpec.model_validate({"strategy_id": "c", "version": 1, "kind": "cascade",
                                    "pools": list(POOLS),
                                    "escalate": {"win_probability_at_least": 1.5}})
