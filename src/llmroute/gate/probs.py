"""The gate's softmax: raw scores or logits to probabilities (numpy only, no model library,
so the rules gate can use it without importing scikit-learn)."""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of an ``(n, k)`` array: each row sums to 1. Max-shifted, so large
    values cannot overflow."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def log_softmax(raw: np.ndarray) -> np.ndarray:
    """``log(softmax(raw))`` of a ``(k,)`` vector, computed without the round trip through
    ``exp`` (max-shifted log-sum-exp)."""
    return raw - raw.max() - np.log(np.exp(raw - raw.max()).sum())
