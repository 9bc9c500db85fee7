"""Retry policy before the first byte: which errors are retried and how long to wait.

Back-off is "full jitter" exponential (AWS Architecture Blog, "Exponential Backoff and
Jitter", 2015): ``uniform(0, min(cap, base · 2^attempt))`` seconds, but never less than an
upstream ``Retry-After`` when the next attempt would go to the same backend.
"""

from __future__ import annotations

import random
import re

from llmroute.config import RetryConfig
from llmroute.errors import (
    BackendError,
    UpstreamConnectError,
    UpstreamInBandError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
    error_object,
)


def backoff_s(config: RetryConfig, attempt: int, rng: random.Random,
              err: BackendError | None = None, same_backend: bool = False) -> float:
    """Seconds to wait before attempt number ``attempt`` (1 = the first retry)."""
    cap = min(config.backoff_max_s, config.backoff_base_s * 2 ** (attempt - 1))
    delay = rng.uniform(0.0, cap)
    if same_backend and isinstance(err, UpstreamStatusError) and err.retry_after_s:
        delay = max(delay, err.retry_after_s)
    return delay


_OVERFLOW = re.compile("|".join([
    r"maximum context length",            # OpenAI; vLLM before v1
    r"model'?s context length",           # SGLang: "longer than the model's context length"
    r"maximum model length",              # vLLM v1: "longer than the maximum model length"
    r"available context size",            # llama.cpp: "exceeds the available context size"
    r"context[_ ]length[_ ]exceeded",     # OpenAI's code, repeated in messages
    r"exceeds? the context window",       # hosted APIs
]), re.IGNORECASE)
_OVERFLOW_MARKS = frozenset({"exceed_context_size_error", "context_length_exceeded"})


def is_context_overflow(err: BackendError) -> bool:
    """True when an engine refused the request for its context window, in any engine's
    words and with any status (an HTTP error, or an in-band error event): llama.cpp's
    ``exceed_context_size_error``, OpenAI's ``context_length_exceeded`` code, or a message in
    ``_OVERFLOW`` (vLLM, SGLang, llama.cpp, OpenAI wordings). Such a request may still fit a
    backend with a larger context, and says nothing about the engine's health."""
    if isinstance(err, UpstreamStatusError):
        inner = error_object(err.body) or {}
        if inner.get("type") in _OVERFLOW_MARKS or inner.get("code") in _OVERFLOW_MARKS:
            return True
    elif not isinstance(err, UpstreamInBandError):
        return False
    return _OVERFLOW.search(err.message) is not None


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
