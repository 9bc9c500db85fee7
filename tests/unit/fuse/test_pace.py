"""The pace of a leg (``fuse/pace.py``): tokens/s over a window against a floor, and the
projected finish against a deadline; judged only after a whole window."""

from __future__ import annotations

import pytest

from llmroute.config import SlowConfig
from llmroute.fuse.pace import Pace, pace_for


def feed(pace: Pace, tps: float, seconds: float, t0: float = 0.0, n0: int = 0
         ) -> list[bool]:
    """Verdicts for a token every 1/tps s from t0 for ``seconds``."""
    out, n, t = [], n0, t0
    while t < t0 + seconds - 1e-9:
        t += 1 / tps
        n += 1
        out.append(pace.slow(t, n))
    return out


def test_nothing_to_watch_makes_no_pace():
    assert pace_for(SlowConfig(), None, 100, 0.0, 0) is None
    assert pace_for(SlowConfig(min_tokens_per_s=3), None, None, 0.0, 0) is not None
    assert pace_for(SlowConfig(), 5.0, 100, 0.0, 0) is not None


def test_a_fast_stream_is_never_slow_and_a_crawl_is_once_a_window_has_passed():
    assert not any(feed(Pace(5.0, 1.0, None, None, 0.0, 0), tps=50, seconds=3))
    crawl = feed(Pace(5.0, 1.0, None, None, 0.0, 0), tps=2, seconds=3)
    assert crawl[:1] == [False]  # inside the first window: not judged
    assert crawl.index(True) == 1  # the first sample a full window after the start


def test_the_rate_is_over_the_last_window_only():
    pace = Pace(5.0, 1.0, None, None, 0.0, 0)
    assert not any(feed(pace, tps=100, seconds=2))         # 200 tokens fast
    assert any(feed(pace, tps=2, seconds=2, t0=2.0, n0=200))  # then a crawl is seen


@pytest.mark.parametrize("tps,budget,slow", [(4, 20, True), (40, 20, False), (4, None, False)],
                         ids=["misses", "makes-it", "no-budget"])
def test_a_projected_finish_past_the_deadline_is_slow(tps, budget, slow):
    pace = Pace(None, 0.5, finish_by=2.0, budget=budget, started=0.0, tokens=0)
    verdicts = feed(pace, tps=tps, seconds=1.0)
    assert any(verdicts) is slow
