"""p2c: power of two choices — sample two backends at random, send to the better one.

Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing" (IEEE TPDS 2001):
choosing the less loaded of two random servers cuts the maximum load from
Θ(log n / log log n) to Θ(log log n), and unlike argmax it does not send a burst of
requests that share one stale snapshot to the same backend.
"""

from __future__ import annotations

import random


class P2cPicker:
    """The better-scored of two distinct random backends first (ties: the one given first),
    the other second, then the rest by descending score (ties by given order). ``rng`` is
    injected (seed it for reproducible runs)."""

    name = "p2c"

    def __init__(self, rng: random.Random):
        self._rng = rng

    def pick(self, scored: dict[str, float]) -> list[str]:
        """The full order; raises nothing (a single backend is returned as is)."""
        order = {bid: i for i, bid in enumerate(scored)}
        ids = list(scored)
        if len(ids) < 2:
            return ids
        pair = sorted(self._rng.sample(ids, 2), key=lambda b: (-scored[b], order[b]))
        rest = sorted((b for b in ids if b not in pair), key=lambda b: (-scored[b], order[b]))
        return pair + rest
