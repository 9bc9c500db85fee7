"""softmax: sample the order with probability ∝ exp(score / temperature).

Spreads load when several router replicas see the same snapshot: argmax would send all of
them to one backend. The whole order is drawn at once with the Gumbel-top-k trick (Kool,
van Hoof & Welling, ICML 2019): sorting ``score / T + Gumbel(0, 1)`` noise descending is a
sample without replacement from the softmax, first to last.
"""

from __future__ import annotations

import math
import random


class SoftmaxPicker:
    """Order sampled from softmax(score / ``temperature``); ``temperature`` is in units of
    total score (small → near argmax, large → near uniform). ``rng`` is injected."""

    name = "softmax"

    def __init__(self, rng: random.Random, temperature: float = 0.1):
        if temperature <= 0:
            raise ValueError("temperature must be > 0")
        self._rng = rng
        self._t = temperature

    def pick(self, scored: dict[str, float]) -> list[str]:
        """Every key once, first = chosen."""
        keys = {bid: s / self._t + _gumbel(self._rng) for bid, s in scored.items()}
        return sorted(keys, key=lambda b: -keys[b])


def _gumbel(rng: random.Random) -> float:
    return -math.log(-math.log(rng.random() or 1e-300) or 1e-300)
