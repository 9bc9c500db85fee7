"""The figures of ``bench/healing.py`` from one arm's replay (``Arm``): bad answers after
the degradation, time to demote, the hot GPU's share while it read above the limit, the
fleet's P95 TTFT after the link slowed, failures and demotions. Times are wall seconds after
the load really started (``Arm.cue`` moves a planned cue onto that clock)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from schedule_load import Outcome

DEGRADED, HOT, SLOW = "gpu-0", "gpu-1", "gpu-2"
LIMIT_C = 78.0
LEAD_S = 10.0
"""Wall seconds between the fleet's start and the load's: the router starts meanwhile (when
it takes longer, the load starts late and every figure is measured from its real start)."""


@dataclass
class Arm:
    """One arm's run: outcomes, the hot GPU's temperatures ``[(offset s, °C)]``, the
    router's quality transitions ``[(monotonic s, backend, new state)]``, the monotonic
    seconds the fleet's model clocks started and the load started, and the healing loop's
    ticks and their CPU seconds."""

    name: str
    plan: Any  # bench/healing.py's Plan: rows, time_scale, degrade_s, slow_s, deadline_s
    outcomes: list[Outcome] = field(default_factory=list)
    temps: list[tuple[float, float]] = field(default_factory=list)
    moves: list[tuple[float, str, str]] = field(default_factory=list)
    fleet_at: float = 0.0
    start_at: float = 0.0
    ticks: int = 0
    tick_cpu_s: float = 0.0
    collector: dict[str, float] | None = None

    def offset(self, o: Outcome) -> float:
        """Planned send time of ``o`` (wall s after the load started)."""
        return self.plan.rows[o.index][0]

    def cue(self, wall_after_lead: float | None) -> float | None:
        """When a cue planned ``wall_after_lead`` s after the planned load start fired,
        in wall s after the real load start."""
        if wall_after_lead is None:
            return None
        return self.fleet_at + LEAD_S + wall_after_lead - self.start_at


def pct(values: list[float], q: float) -> float:
    """Nearest-rank ``q``-quantile; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def bad_answers(arm: Arm) -> int:
    """Requests the router started on the degraded engine after it went bad."""
    bad_at = arm.cue(arm.plan.degrade_s)
    return sum(1 for o in arm.outcomes if o.backend == DEGRADED and arm.offset(o) >= bad_at)


def time_to_demote(arm: Arm) -> float | None:
    """Wall seconds from the degradation to gpu-0's first demotion; None: never."""
    bad_at = arm.start_at + arm.cue(arm.plan.degrade_s)
    times = [t - bad_at for t, b, state in arm.moves
             if b == DEGRADED and state in ("cut", "ejected") and t >= bad_at]
    return min(times) if times else None


def hot_share(arm: Arm) -> tuple[float | None, int]:
    """``(share of the requests sent while gpu-1 read above the limit that went to it,
    how many such requests)``; a request counts when the polls on both sides of its send
    time read above the limit."""
    temps, sent, mine = arm.temps, 0, 0
    for o in arm.outcomes:
        t = arm.offset(o)
        before = [c for s, c in temps if s <= t][-1:]
        after = [c for s, c in temps if s >= t][:1]
        if before and after and before[0] > LIMIT_C and after[0] > LIMIT_C:
            sent += 1
            mine += o.backend == HOT
    return (mine / sent if sent else None), sent


def slow_link(arm: Arm) -> tuple[float, float]:
    """``(gpu-2's share of the requests sent after its link slowed, the fleet's P95 TTFT
    over them in model seconds)``; a request the client gave up on counts at the
    deadline."""
    slow_at = arm.cue(arm.plan.slow_s)
    after = [o for o in arm.outcomes if arm.offset(o) >= slow_at]
    ttfts = [o.ttft_s / arm.plan.time_scale for o in after if o.ttft_s is not None
             and o.status in ("ok", "unfinished")]
    ttfts += [arm.plan.deadline_s] * sum(o.status == "deadline" for o in after)
    share = sum(o.backend == SLOW for o in after) / max(len(after), 1)
    return share, pct(ttfts, 0.95)


def p95_by_backend(arm: Arm) -> dict[str, float]:
    """P95 TTFT (model s) per backend that started the request, over the requests sent
    after the link slowed (a gave-up request has no backend: it is left out here)."""
    slow_at = arm.cue(arm.plan.slow_s)
    by: dict[str, list[float]] = {}
    for o in arm.outcomes:
        if arm.offset(o) >= slow_at and o.ttft_s is not None and o.backend:
            by.setdefault(o.backend, []).append(o.ttft_s / arm.plan.time_scale)
    return {b: round(pct(v, 0.95), 3) for b, v in sorted(by.items())}


def failures(arm: Arm) -> float:
    """Failed or gave-up requests over the settled ones (0–1)."""
    settled = [o for o in arm.outcomes if o.status != "unfinished"]
    return sum(o.status in ("failed", "deadline") for o in settled) / max(len(settled), 1)


def demotions(arm: Arm, *, but: str | None = None) -> int:
    """Demotions of any backend but ``but``: each move to cut, and each move to ejected
    straight from healthy (overwhelming evidence skips the cut)."""
    count, last = 0, {}
    for _, b, state in arm.moves:
        count += b != but and (state == "cut" or (state == "ejected"
                                                  and last.get(b, "healthy") == "healthy"))
        last[b] = state
    return count
