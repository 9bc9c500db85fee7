"""Sample: bounded decisions in large pools.

Scoring is linear in the backends scored (``anchor/profile.py``: a few list passes per
scorer; ``bench/decide.py`` measured 0.27 ms at 100 backends and 2.7 ms at 1,000 on one
core, where the cheap filters before it cost 0.12 ms). When more than ``above`` backends
survive the cheap filters, this filter — the last before ``ttft-headroom`` — keeps ``size``
of them: the
backends expected to hold most of the prompt's prefix (``Affinity.cached_tokens``, when the
profile prices prefix affinity; at most half the sample, longest match first), then a
uniform random sample of the rest. The scorers and the picker then choose among those.

Why a random sample serves: with ``d`` backends drawn at random and the least loaded of them
chosen, the longest queue in a fleet of ``n`` grows as ``log log n / log d`` instead of the
``log n / log log n`` of one random choice (Mitzenmacher, "The Power of Two Choices in
Randomized Load Balancing", IEEE TPDS 12(10), 2001) — the technique behind Envoy's
``LEAST_REQUEST`` (``choice_count``) and NGINX's ``random two least_conn``. With ``size``
64 the pick is the best of 64: in expectation within the top 1/65 of the pool by score.
A pool of at most ``above`` backends (every built-in benchmark fleet but ``bench/decide.py``'s
1,000) is ranked whole, as before.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from llmroute.anchor.prefix import Affinity
from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend


class SampleFilter:
    """Keeps every candidate up to ``above`` of them, else ``size`` (≤ ``above``) chosen as
    the module docstring says, order kept. ``rng`` is the profile's injected generator."""

    def __init__(self, above: int, size: int, affinity: Affinity, rng: random.Random):
        self.above, self.size = above, min(size, above)
        self._affinity, self._rng = affinity, rng

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept; the list as is up to ``above``."""
        n = len(candidates)
        if n <= self.above:
            return list(candidates)
        keep = set(self._holders(ctx, candidates))
        for i in self._rng.sample(range(n), self.size):  # distinct: enough to fill up
            if len(keep) >= self.size:
                break
            keep.add(i)
        return [candidates[i] for i in sorted(keep)]

    def _holders(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[int]:
        """Positions of the candidates expected to hold the most of the prompt's prefix
        (any at all), longest first, at most half the sample; none unless priced. Costs a
        pass over the pool only when some backend holds the prefix (``Affinity.holders``
        reads the index's matches, not the pool)."""
        if not self._affinity.pricing:
            return []
        held = self._affinity.holders(ctx, candidates)
        if not held:
            return []
        ids, most = [b.id for b in candidates], self.size // 2
        if len(held) > most:  # many holders: one map beats a scan each
            where = dict(zip(ids, range(len(ids))))
            return [i for i in map(where.get, held) if i is not None][:most]
        out = []
        for bid in held:
            try:
                out.append(ids.index(bid))
            except ValueError:  # filtered out before the sample
                continue
        return out
