"""The router's sliding window of finished requests, with O(log n) upkeep per request:
sorted TTFT and latency lists (``bisect``) and running sums, so reading p50/p95, the failed
fraction and output tokens/s costs no scan of the window."""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import NamedTuple


class Sample(NamedTuple):
    """One finished request: clock time ``at`` (s), ``ok``, end-to-end ``latency_ms`` and
    ``ttft_ms`` (None when unknown), ``output_tokens`` and the generation time ``gen_s``
    (end-to-end minus TTFT, seconds). Immutable (a named tuple: one is made per request)."""

    at: float
    ok: bool
    latency_ms: float | None = None
    ttft_ms: float | None = None
    output_tokens: int | None = None
    gen_s: float | None = None

    @property
    def timed(self) -> bool:
        """Counts towards tokens/s: succeeded, produced tokens, took generation time."""
        return bool(self.ok and self.output_tokens and self.gen_s is not None and self.gen_s > 0)


def nearest_rank_sorted(ordered: list[float], q: float) -> float | None:
    """The nearest-rank ``q``-quantile (0 < q ≤ 1) of an already sorted list; None if empty
    (Hyndman & Fan 1996, definition 1)."""
    if not ordered:
        return None
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


class Window:
    """The requests that ended in the last ``window_s`` seconds, at most ``maxlen``."""

    def __init__(self, window_s: float, maxlen: int):
        self._window_s, self._maxlen = window_s, maxlen
        self._samples: deque[Sample] = deque()
        self.ttfts: list[float] = []       # sorted, successful samples only
        self.latencies: list[float] = []   # sorted, successful samples only
        self.good = 0
        self._tokens = 0
        self._gen_s = 0.0

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, sample: Sample, now: float) -> None:
        """Append ``sample``; drop samples older than the window or beyond ``maxlen``."""
        self._samples.append(sample)
        self._count(sample, +1)
        while len(self._samples) > self._maxlen or self._samples[0].at < now - self._window_s:
            self._count(self._samples.popleft(), -1)

    def error_rate(self) -> float | None:
        """Failed fraction (0–1) of the window; None when empty."""
        n = len(self._samples)
        return (n - self.good) / n if n else None

    def output_tps(self) -> float | None:
        """Output tokens per second of generation time over the window; None if unknown."""
        return self._tokens / self._gen_s if self._gen_s > 1e-12 else None

    def _count(self, s: Sample, sign: int) -> None:
        if not s.ok:
            return
        self.good += sign
        for ordered, value in ((self.ttfts, s.ttft_ms), (self.latencies, s.latency_ms)):
            if value is None:
                continue
            if sign > 0:
                bisect.insort(ordered, value)
            else:
                del ordered[bisect.bisect_left(ordered, value)]
        if s.timed:
            self._tokens += sign * s.output_tokens
            self._gen_s = max(self._gen_s + sign * s.gen_s, 0.0)
