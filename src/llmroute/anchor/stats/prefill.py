"""A per-backend model of time to first token: ``TTFT ≈ overhead + tokens ahead × ms/token``.

"Tokens ahead" are the prompt tokens the backend must prefill before this request's first
token: its own prompt plus the prompts of the requests the router sent there that have no
first token yet (``RouterStats.prefill_tokens``). An engine with continuous batching and
chunked prefill (vLLM, SGLang) prefills waiting prompts first come, first served, so TTFT
grows about linearly in that sum; the slope is the engine's prefill time per token under
its current decode load, the intercept the fixed part (a step's weight read, scheduling,
the network).

Fitted by exponentially weighted least squares (Plackett 1950; the recursive form is in
Ljung & Söderström, "Theory and Practice of Recursive Identification", 1983): every sample
``(tokens ahead, TTFT ms)`` multiplies the old sums by ``decay`` first, so about the last
``1 / (1 − decay)`` samples count. While the samples cannot separate slope from intercept
(fewer than ``MIN_SAMPLES``, or all at nearly the same size), or the fit is not physical
(a slope ≤ 0 or an intercept < 0), the line through the origin is used instead
(``ms/token = Σ TTFT / Σ tokens``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECAY = 0.95
"""Weight kept by the old samples at each new one (≈ the last 20 samples count)."""
MIN_SAMPLES = 4
"""Samples before slope and intercept are fitted separately."""


@dataclass
class PrefillFit:
    """Running weighted sums of ``(x = tokens ahead, y = TTFT ms)`` for one backend."""

    decay: float = DECAY
    samples: int = 0
    _w: float = 0.0
    _x: float = 0.0
    _y: float = 0.0
    _xx: float = 0.0
    _xy: float = 0.0

    def add(self, tokens: float, ttft_ms: float) -> None:
        """Learn one first token: ``tokens`` ahead of it (≥ 1) took ``ttft_ms``; samples
        with a non-positive size or time are ignored."""
        if not tokens > 0 or not ttft_ms > 0 or math.isinf(ttft_ms):
            return
        d = self.decay
        self._w = d * self._w + 1.0
        self._x = d * self._x + tokens
        self._y = d * self._y + ttft_ms
        self._xx = d * self._xx + tokens * tokens
        self._xy = d * self._xy + tokens * ttft_ms
        self.samples += 1

    def model(self) -> tuple[float, float] | None:
        """``(overhead_ms, ms_per_token)``, or None before the first sample."""
        if self.samples == 0:
            return None
        det = self._w * self._xx - self._x * self._x
        if self.samples >= MIN_SAMPLES and det > 1e-6 * self._w * self._xx:
            slope = (self._w * self._xy - self._x * self._y) / det
            overhead = (self._y - slope * self._x) / self._w
            if slope > 0 and overhead >= 0:
                return overhead, slope
        return 0.0, self._y / self._x
