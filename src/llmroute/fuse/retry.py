"""Retry policy before the first byte: which errors are retried and how long to wait.

Back-off is "full jitter" exponential (AWS Architecture Blog, "Exponential Backoff and
Jitter", 2015): ``uniform(0, min(cap, base · 2^attempt))`` seconds, but never less than an
upstream ``Retry-After`` when the next attempt would go to the same backend.
"""

from __future__ import annotations

import random

from llmroute.config import RetryConfig
from llmroute.errors import (
    BackendError,
    UpstreamConnectError,
    UpstreamInBandError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
)


def backoff_s(config: RetryConfig, attempt: int, rng: random.Random,
              err: BackendError | None = None, same_backend: bool = False) -> float:
    """Seconds to wait before attempt number ``attempt`` (1 = the first retry)."""
    cap = min(config.backoff_max_s, config.backoff_base_s * 2 ** (attempt - 1))
    delay = rng.uniform(0.0, cap)
    if same_backend and isinstance(err, UpstreamStatusError) and err.retry_after_s:
        delay = max(delay, err.retry_after_s)
    return delay


def is_context_overflow(err: BackendError) -> bool:
    """True when an engine refused the request for its context window: llama.cpp answers 400
    with ``error.type == "exceed_context_size_error"``, vLLM 400 with "maximum context
    length" in the message. Such a request may still fit a backend with a larger context."""
    if not isinstance(err, UpstreamStatusError) or err.upstream_status != 400:
        return False
    inner = err.body.get("error") if isinstance(err.body, dict) else None
    kind = inner.get("type") if isinstance(inner, dict) else None
    return kind == "exceed_context_size_error" or "maximum context length" in err.message


def failure_reason(err: BackendError) -> str:
    """The fuse's name for a mid-stream failure: ``stall`` or ``timeout`` (UpstreamTimeout by
    phase), ``cut`` (connection lost), ``inband`` (an error event in the stream),
    ``malformed`` (an unparsable chunk), else ``status``."""
    if isinstance(err, UpstreamTimeout):
        return "stall" if err.phase == "stall" else "timeout"
    if isinstance(err, UpstreamConnectError):
        return "cut"
    if isinstance(err, UpstreamInBandError):
        return "inband"
    if isinstance(err, UpstreamProtocolError):
        return "malformed"
    return "status"
