"""Slow streams: a stream that keeps moving, but too slowly, is handed off like a stall.

A stream at 2 tokens/s never stalls — every token comes well inside ``timeouts.stall_s`` —
yet it may never finish in time. ``Pace`` watches one leg's tokens against the clock (the
result layer watches tokens/s, seed 000 §2.2) and calls it slow when, over its last
``window_s`` seconds:

* its rate (tokens / seconds) is under a configured floor (``fuse.slow.min_tokens_per_s``),
  or
* at that rate, the answer's remaining budget (``max_tokens`` less the tokens streamed) would
  finish after the request's deadline (its priority class's ``e2e_target_s`` from arrival:
  ``ChatRequest.finish_by``). A request without a budget has no projected finish.

A leg is judged only once it has streamed for a whole window (its first token starts the
clock: the TTFT has its own bound), then on each chunk. Pure: the caller passes ``now``
(seconds of the relay's clock) and the tokens streamed so far. Costs nothing where neither
a floor nor a deadline is set (no ``Pace`` is made).
"""

from __future__ import annotations

import collections
import math

from llmroute.config import SlowConfig


class Pace:
    """One leg's pace against ``floor_tps`` (tokens/s, None: none) and ``finish_by`` (clock
    seconds, None: none) with ``budget`` tokens in all (None: unknown), over ``window_s``;
    the leg began streaming at ``started`` (clock s) with ``tokens`` already streamed."""

    __slots__ = ("_floor", "_window", "_finish_by", "_budget", "_started", "_samples")

    def __init__(self, floor_tps: float | None, window_s: float, finish_by: float | None,
                 budget: int | None, started: float, tokens: int):
        self._floor, self._window = floor_tps, window_s
        self._finish_by = finish_by if budget is not None else None
        self._budget = budget
        self._started = started
        self._samples: collections.deque[tuple[float, int]] = collections.deque(
            [(started, tokens)])

    def rate(self, now: float, tokens: int) -> float:
        """Tokens per second over the last window (recording this sample)."""
        samples = self._samples
        samples.append((now, tokens))
        while len(samples) > 2 and samples[1][0] <= now - self._window:
            samples.popleft()
        t0, n0 = samples[0]
        return (tokens - n0) / (now - t0) if now > t0 else math.inf

    def slow(self, now: float, tokens: int) -> bool:
        """True when the leg is too slow (module docstring) at ``now`` with ``tokens``
        streamed in all."""
        rate = self.rate(now, tokens)
        if now - self._started < self._window:
            return False
        if self._floor is not None and rate < self._floor:
            return True
        if self._finish_by is None or self._budget is None:
            return False
        left = self._budget - tokens
        return left > 0 and (rate <= 0 or now + left / rate > self._finish_by)


def pace_for(config: SlowConfig, finish_by: float | None, budget: int | None, now: float,
             tokens: int) -> Pace | None:
    """A ``Pace`` for a leg starting at ``now`` with ``tokens`` streamed, or None when there
    is nothing to watch (no floor and no deadline)."""
    if config.min_tokens_per_s is None and finish_by is None:
        return None
    return Pace(config.min_tokens_per_s, config.window_s, finish_by, budget, now, tokens)
