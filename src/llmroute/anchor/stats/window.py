"""The router's sliding window of finished requests, with O(log n) upkeep per request:
sorted TTFT and latency lists (``bisect``) and running sums, so reading p50/p95, the failed
fraction and output tokens/s (``summary``) costs no scan of the window."""

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
        samples = self._samples
        samples.append(sample)
        if sample.ok:
            self._enter(sample)
        horizon, maxlen = now - self._window_s, self._maxlen
        while len(samples) > maxlen or samples[0].at < horizon:
            old = samples.popleft()
            if old.ok:
                self._leave(old)

    def summary(self) -> tuple[float | None, float | None, float | None, float | None, int]:
        """``(ttft_p95_ms, latency_p95_ms, error_rate, output_tps, samples)``: the nearest-rank
        p95s of the successful samples, the failed fraction (0–1) and the output tokens per
        second of generation time; each None when the window has nothing to say."""
        n = len(self._samples)
        ttfts, latencies = self.ttfts, self.latencies
        return (nearest_rank_sorted(ttfts, 0.95) if ttfts else None,
                nearest_rank_sorted(latencies, 0.95) if latencies else None,
                (n - self.good) / n if n else None,
                self._tokens / self._gen_s if self._gen_s > 1e-12 else None, n)

    def _enter(self, s: Sample) -> None:
        """Count a successful sample in."""
        self.good += 1
        if s.ttft_ms is not None:
            bisect.insort(self.ttfts, s.ttft_ms)
        if s.latency_ms is not None:
            bisect.insort(self.latencies, s.latency_ms)
        if s.output_tokens and s.gen_s is not None and s.gen_s > 0:  # ``s.timed``
            self._tokens += s.output_tokens
            self._gen_s += s.gen_s

    def _leave(self, s: Sample) -> None:
        """Count a successful sample out."""
        self.good -= 1
        if s.ttft_ms is not None:
            del self.ttfts[bisect.bisect_left(self.ttfts, s.ttft_ms)]
        if s.latency_ms is not None:
            del self.latencies[bisect.bisect_left(self.latencies, s.latency_ms)]
        if s.output_tokens and s.gen_s is not None and s.gen_s > 0:  # ``s.timed``
            self._tokens -= s.output_tokens
            self._gen_s = max(self._gen_s - s.gen_s, 0.0)
