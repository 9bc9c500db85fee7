"""Retry policy before the first byte: which errors are retried and how long to wait.

Back-off is "full jitter" exponential (AWS Architecture Blog, "Exponential Backoff and
Jitter", 2015): ``uniform(0, min(cap, base · 2^attempt))`` seconds, but never less than an
upstream ``Retry-After`` when the next attempt would go to the same backend.
"""

from __future__ import annotations

import random

from llmroute.config import RetryConfig
from llmroute.errors import BackendError, UpstreamStatusError


def is_retryable(err: BackendError) -> bool:
    """Connect errors, timeouts, protocol errors, 429 and 5xx are retryable; other 4xx not."""
    return err.retryable


def backoff_s(config: RetryConfig, attempt: int, rng: random.Random,
              err: BackendError | None = None, same_backend: bool = False) -> float:
    """Seconds to wait before attempt number ``attempt`` (1 = the first retry)."""
    cap = min(config.backoff_max_s, config.backoff_base_s * 2 ** (attempt - 1))
    delay = rng.uniform(0.0, cap)
    if same_backend and isinstance(err, UpstreamStatusError) and err.retry_after_s:
        delay = max(delay, err.retry_after_s)
    return delay
