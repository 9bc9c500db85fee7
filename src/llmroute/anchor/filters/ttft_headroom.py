"""TTFT headroom: drop backends predicted to give this request its first token much later
than the soonest one.

Weighted scorers trade signals against each other, so a backend with a free KV cache can
outscore one that would answer seconds sooner (the KV terms reward it by more than the
``expected-ttft`` weight can take away). This filter makes the predicted TTFT a bound
instead: a candidate is kept when its prediction (``scorers/expected_ttft.predicted_ttfts``,
ms) is at most ``max(factor × best, best + slack_ms)``, ``best`` the soonest candidate's;
the scorers then choose among those. It is the headroom idea of SLO-aware endpoint
picking (llm-d's predicted-latency scheduling keeps endpoints whose predicted TTFT leaves
headroom under the request's SLO), with the SLO set relative to what the fleet can do now.

Nothing is dropped while no backend has a TTFT model (every prediction NaN), and a backend
without one of its own is predicted optimistically, so it stays in and gets learned.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.anchor.prefix import Affinity
from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.expected_ttft import predicted_ttfts
from llmroute.types import Backend

FACTOR = 3.0
"""Default: keep backends predicted within three times the soonest TTFT …"""
SLACK_MS = 1000.0
"""… or within this many ms of it (differences under a second are left to the scorers).
Both chosen with ``bench/schedule.py``: at 2× / 500 ms the filter sent short prompts to
idle engines with small, full caches (KV spread ±6.6–10.5 over two runs); at 3× / 1000 ms
the scorers had more room (±7.2) and P95 TTFT stayed far under least-in-flight's."""

KEEP = 3
"""Default: the fewest candidates the filter leaves — a burst that puts one idle engine far
ahead still leaves the scorers a choice of three (KV spread ±7.6–7.9 against ±8.4 with one,
in ``bench/schedule.py`` runs of 2,000 requests)."""


class TtftHeadroomFilter:
    """Keeps candidates predicted within ``max(factor × best, best + slack_ms)`` of the
    soonest TTFT (module docstring); ``factor`` ≥ 1, ``slack_ms`` ≥ 0 (ms). When fewer than
    ``keep`` (≥ 1) pass, the ``keep`` soonest are kept instead, so the scorers still have a
    choice during a burst that leaves one idle engine far ahead. Never empties a non-empty
    list. With ``affinity`` pricing the predictions leave out each backend's expected cached
    prefix (``scorers/expected_ttft.predicted_ttfts``)."""

    def __init__(self, factor: float = FACTOR, slack_ms: float = SLACK_MS, keep: int = KEEP,
                 affinity: Affinity | None = None):
        self._factor = factor
        self._slack_ms = slack_ms
        self._keep = keep
        self._affinity = affinity

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept; the input list itself when every
        candidate passes (so the ``expected-ttft`` scorer reuses the memoised predictions)."""
        survivors = candidates if isinstance(candidates, list) else list(candidates)
        if len(survivors) < 2:
            return survivors
        times = predicted_ttfts(ctx, survivors, self._affinity)
        best = min(times)
        if best != best:  # no model anywhere yet
            return survivors
        limit = max(self._factor * best, best + self._slack_ms)
        if max(times) <= limit:
            return survivors
        kept = [b for b, t in zip(survivors, times) if t <= limit]
        if len(kept) >= self._keep:
            return kept
        soonest = sorted(range(len(times)), key=times.__getitem__)[:self._keep]
        return [survivors[i] for i in sorted(soonest)]
