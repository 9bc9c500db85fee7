"""The ``quality:`` section: quality ejection (``fuse/ejection.py``: the test, the state
machine, the bounds; ``assemble/healing.py``: the loop that runs it)::

    quality:
      enabled: true            # false: answers are not judged and nothing is demoted
      window_s: 120            # the sliding window of answers per backend (s) …
      window_max: 512          # … and at most this many of them
      tick_s: 1.0              # how often the loop evaluates (s)
      min_answers: 10          # never act on fewer answers, of the backend and of its pool
      alpha: 1.0e-6            # per evaluation and window test (≤ 2·alpha each); the
                               # CUSUM fires at ln(1/alpha): ≤ N·alpha over N answers;
                               # at alpha² the evidence is overwhelming (no cut: ejected)
      min_gap: 0.2             # bad fraction at least this far above the pool's …
      min_entropy_gap_nats: 0.5  # … or mean entropy at least this far above it
      cut_share: 0.25          # share of its requests a cut backend still gets
      cut_s: 10                # how long a cut lasts before ejection (or return)
      cooloff_s: 30            # an ejection's cool-off, doubled per relapse …
      max_cooloff_s: 600       # … up to this
      probe_share: 0.1         # share of its requests a probing (half-open) backend gets
      max_pool_share: 0.5      # never more of a pool demoted (one always stays healthy)
      max_fleet_share: 0.5     # never more of all backends demoted
      share_fleet: true        # with state.kind redis: replicas judge the fleet's answers
"""

from __future__ import annotations

from pydantic import Field

from llmroute.config.base import Strict


class QualityConfig(Strict):
    """Quality ejection (module docstring): times in seconds, shares and ratios 0–1."""

    enabled: bool = True
    window_s: float = Field(120.0, gt=0)
    window_max: int = Field(512, ge=1)
    tick_s: float = Field(1.0, gt=0)
    min_answers: int = Field(10, ge=1)
    alpha: float = Field(1e-6, gt=0, lt=0.5)
    min_gap: float = Field(0.2, ge=0, le=1)
    min_entropy_gap_nats: float = Field(0.5, ge=0)
    cut_share: float = Field(0.25, ge=0, le=1)
    cut_s: float = Field(10.0, ge=0)
    cooloff_s: float = Field(30.0, gt=0)
    max_cooloff_s: float = Field(600.0, gt=0)
    probe_share: float = Field(0.1, gt=0, le=1)
    max_pool_share: float = Field(0.5, ge=0, le=1)
    max_fleet_share: float = Field(0.5, ge=0, le=1)
    share_fleet: bool = True
