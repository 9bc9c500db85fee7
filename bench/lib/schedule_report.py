"""What ``bench/schedule.py`` measured, turned into figures: one policy's run (``Run``), the
tables, the plot and the RESULT object, the goodput sweep's included."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedule_load import Busy, FirstTokens, Outcome, Poll


@dataclass(frozen=True)
class Run:
    """One policy's measurements, in model seconds. TTFT percentiles count a request the
    client gave up on (``deadline``) as the deadline — a lower bound, which can only
    flatten a policy's tail; requests still streaming when the run ended (``unfinished``)
    count for TTFT, not for end-to-end latency or failures. ``busy``: the engines' busy
    counters as the first and as the last request was sent; ``first_tokens``: the engines'
    own TTFT histograms at the end (None when not read)."""

    policy: str
    outcomes: list[Outcome]
    polls: list[Poll]
    time_scale: float
    deadline_s: float
    busy: list[Busy] = field(default_factory=list)
    first_tokens: FirstTokens | None = None

    def engine_within(self, bound: float) -> float:
        """The share (0–1) of the run's requests whose engine-side TTFT (model s, the
        engines' histograms) was ≤ ``bound``, a bucket bound; NaN when not read."""
        if self.first_tokens is None:
            return math.nan
        return self.first_tokens.share_within(bound, len(self.outcomes))

    def count(self, status: str) -> int:
        """Requests that ended with ``status``."""
        return sum(1 for o in self.outcomes if o.status == status)

    def ttft(self) -> list[float]:
        """Sorted TTFTs (model s), gave-up requests counted at the deadline."""
        seen = [o.ttft_s / self.time_scale for o in self.outcomes if o.ttft_s is not None
                and o.status in ("ok", "unfinished")]
        return sorted(seen + [self.deadline_s] * self.count("deadline"))

    def e2e(self) -> list[float]:
        """Sorted end-to-end latencies (model s) of the successful requests."""
        return sorted(o.e2e_s / self.time_scale for o in self.outcomes if o.status == "ok")

    def failure_rate(self) -> float:
        """Failed or gave-up requests over the settled ones (fraction 0–1)."""
        settled = len(self.outcomes) - self.count("unfinished")
        return (self.count("failed") + self.count("deadline")) / max(settled, 1)

    def kv_spread(self) -> float:
        """Time-averaged population standard deviation of KV usage across engines (0–1)."""
        return statistics.fmean(statistics.pstdev(p.kv) for p in self.polls)

    def kv_means(self) -> list[float]:
        """Each engine's time-averaged KV-cache usage (0–1)."""
        return [statistics.fmean(p.kv[i] for p in self.polls)
                for i in range(len(self.polls[0].kv))]

    def gpu_busy(self) -> float:
        """The fleet's mean GPU-busy fraction (0–1) while requests were being sent: per
        engine, the busy model seconds between the first and the last send over the model
        seconds between them; averaged over the engines. NaN without both reads."""
        if len(self.busy) < 2:
            return math.nan
        first, last = self.busy[0], self.busy[-1]
        model_s = (last.t - first.t) / self.time_scale
        if model_s <= 0:
            return math.nan
        return statistics.fmean(min((b1 - b0) / model_s, 1.0)
                                for b0, b1 in zip(first.seconds, last.seconds, strict=True))

    def load(self, i: int) -> tuple[float, int]:
        """Engine ``i``'s time-averaged running requests and its most waiting at one poll."""
        return (statistics.fmean(p.running[i] for p in self.polls),
                max(p.waiting[i] for p in self.polls))


@dataclass(frozen=True)
class Probe:
    """One load of a goodput sweep: ``within`` the share (0–1) of its requests whose
    engine-side TTFT met the target (``Run.engine_within``); ``client_p95_s`` the P95 TTFT
    the client saw (model s: the router, the processes and the machine's lag included)."""

    within: float
    client_p95_s: float

    @property
    def met(self) -> bool:
        """P95 TTFT within the target: at least 95 % of the requests within it."""
        return self.within >= 0.95


@dataclass
class Sweep:
    """One policy's goodput sweep: a ``Probe`` for each offered load probed (a fraction of
    the fleet's capacity) and the highest load whose P95 TTFT met the target (0.0 when none
    did)."""

    policy: str
    target_s: float
    probes: dict[float, Probe] = field(default_factory=dict)

    @property
    def sustained(self) -> float:
        """The highest probed load whose P95 TTFT met the target; 0.0 when none did."""
        return max((load for load, probe in self.probes.items() if probe.met), default=0.0)


def pct(values: list[float], q: float) -> float:
    """The ``q``-quantile (0–1) by the nearest-rank method; NaN when empty."""
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def table(runs: list[Run], bound: float) -> str:
    """The human-readable comparison; ``bound`` (s) the TTFT whose share at the engines is
    shown."""
    head = (f"{'policy':<16}{'n':>6}{'TTFT p50':>10}{'p95':>8}{'p99':>8}{'E2E p50':>9}"
            f"{'p95':>8}{'p99':>8}{'failed':>8}{'gave up':>8}{'running':>8}{'KV mean':>8}"
            f"{'KV ±':>7}{'GPU busy':>9}{f'≤{bound:g} s@eng':>12}")
    lines = [head, "-" * len(head)]
    for r in runs:
        ttft, e2e = r.ttft(), r.e2e()
        lines.append(f"{r.policy:<16}{len(r.outcomes):>6}{pct(ttft, .5):>10.3f}"
                     f"{pct(ttft, .95):>8.3f}{pct(ttft, .99):>8.3f}{pct(e2e, .5):>9.2f}"
                     f"{pct(e2e, .95):>8.2f}{pct(e2e, .99):>8.2f}{r.failure_rate():>8.2%}"
                     f"{r.count('deadline'):>8}{r.count('unfinished'):>8}"
                     f"{statistics.fmean(r.kv_means()):>8.1%}{r.kv_spread():>7.1%}"
                     f"{r.gpu_busy():>9.1%}{r.engine_within(bound):>12.1%}")
    return "\n".join(lines) + "\n(times in model seconds)"


def sweep_table(sweeps: list[Sweep], capacity_rps: float) -> str:
    """Each policy's probes (load: engine-side share within the target / the client's P95
    TTFT) and its sustained load."""
    lines = []
    for s in sweeps:
        probes = ", ".join(f"{load:.1%}: {p.within:.0%} / {p.client_p95_s:.2f} s"
                           for load, p in sorted(s.probes.items()))
        lines.append(f"{s.policy:<16} sustains {s.sustained:>5.1%} = "
                     f"{s.sustained * capacity_rps:6.2f} req/s (P95 TTFT ≤ {s.target_s:g} s "
                     f"at the engines); probes (engine share within / client P95) {probes}")
    return "\n".join(lines)


def per_engine(runs: list[Run], specs: list[Any], schedule: list[tuple[float, int, int]]
               ) -> str:
    """Per engine and policy: requests served, their P95 TTFT (model s) and the engine's
    time-averaged KV-cache usage; then P95 TTFT by prompt size."""
    lines = [f"{'engine':<20}" + "".join(f"{r.policy:>43}" for r in runs)]
    for i, s in enumerate(specs):
        cells = []
        for r in runs:
            mine = [o for o in r.outcomes if o.backend == f"gpu-{i}"]
            p95 = pct(sorted(o.ttft_s / r.time_scale for o in mine if o.ttft_s), .95)
            run, wait = r.load(i)
            cells.append(f"{len(mine):>4} req {p95:>6.2f} s {r.kv_means()[i]:>5.1%} KV"
                         f" {run:>5.1f} run {wait:>3} wait")
        lines.append(f"{f'gpu-{i} {s.profile}/{s.model_size}':<20}" + "".join(
            f"{c:>43}" for c in cells))
    for lo, hi in ((0, 2000), (2000, 4000), (4000, 10**9)):
        cells = []
        for r in runs:
            ttft = [o.ttft_s / r.time_scale for o in r.outcomes if o.ttft_s
                    and lo <= schedule[o.index][1] < hi]
            cells.append(f"{len(ttft):>4} req {pct(sorted(ttft), .95):>6.2f} s p95")
        label = f"prompt {lo // 1000}k-{hi // 1000}k" if hi < 10**9 else f"prompt ≥{lo // 1000}k"
        lines.append(f"{label:<20}" + "".join(f"{c:>43}" for c in cells))
    return "\n".join(lines)


def plot(runs: list[Run], specs: list[Any], path: Path) -> None:
    """TTFT CDFs and per-engine KV usage, one colour per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in runs:
        ttft = r.ttft()
        ax1.plot(ttft, [(i + 1) / len(ttft) for i in range(len(ttft))], label=r.policy)
    ax1.set(xscale="log", xlabel="TTFT (model s)", ylabel="fraction of requests",
            title="TTFT CDF")
    ax1.legend()
    width = 0.8 / len(runs)
    for k, r in enumerate(runs):
        xs = [i + k * width for i in range(len(specs))]
        ax2.bar(xs, [100 * v for v in r.kv_means()], width, label=r.policy)
    ax2.set_xticks([i + 0.4 - width / 2 for i in range(len(specs))],
                   [f"{s.profile}\n{s.model_size}" for s in specs], fontsize=8)
    ax2.set(ylabel="KV-cache usage, time-averaged (%)", title="KV cache per engine")
    ax2.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _ratio(a: float | None, b: float | None, digits: int = 4) -> float | None:
    """``a / b`` rounded; None when either is missing or ``b`` is 0."""
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return round(a / b, digits)


def _by_policy(by: dict[str, Run], figure: Any, digits: int = 4) -> dict[str, float]:
    """``figure(run)`` for each policy, rounded."""
    return {k: round(figure(r), digits) for k, r in by.items()}


def result(runs: list[Run], sweeps: list[Sweep], capacity_rps: float) -> dict[str, Any]:
    """The RESULT figures: the anchor's ratios against the baselines of the same run (None
    for a policy that was not run)."""
    by = {r.policy: r for r in runs}
    p95 = _by_policy(by, lambda r: pct(r.ttft(), 0.95))
    p99 = _by_policy(by, lambda r: pct(r.ttft(), 0.99))
    busy = _by_policy(by, Run.gpu_busy)
    goodput = {s.policy: s.sustained for s in sweeps}
    anchor = by.get("default")
    return {"p95_ttft_ratio_vs_round_robin": _ratio(p95.get("default"), p95.get("round-robin")),
            "p95_ttft_ratio_vs_least_inflight": _ratio(p95.get("default"),
                                                       p95.get("least-in-flight")),
            "p99_ttft_ratio_vs_rr": _ratio(p99.get("default"), p99.get("round-robin")),
            "goodput_ratio_vs_rr": _ratio(goodput.get("default"), goodput.get("round-robin"),
                                          3),
            "goodput_ratio_vs_least_inflight": _ratio(goodput.get("default"),
                                                      goodput.get("least-in-flight"), 3),
            "gpu_busy_default": busy.get("default"), "gpu_busy_rr": busy.get("round-robin"),
            "failure_rate": None if anchor is None else round(anchor.failure_rate(), 5),
            "kv_spread": None if anchor is None else round(anchor.kv_spread(), 4),
            "p95_ttft_s": p95, "p99_ttft_s": p99,
            "e2e_p95_s": _by_policy(by, lambda r: pct(r.e2e(), 0.95), 3),
            "e2e_p99_s": _by_policy(by, lambda r: pct(r.e2e(), 0.99), 3),
            "gpu_busy_by_policy": busy,
            "goodput_load_fraction": goodput,
            "goodput_rps": {k: round(v * capacity_rps, 3) for k, v in goodput.items()},
            "goodput_target_p95_ttft_s": sweeps[0].target_s if sweeps else None,
            "engine_ttft_within_target_by_policy": {
                k: round(r.engine_within(sweeps[0].target_s), 4) for k, r in by.items()
            } if sweeps else {},
            "goodput_probes": {s.policy: {str(load): [round(p.within, 4),
                                                      round(p.client_p95_s, 3)]
                                          for load, p in sorted(s.probes.items())}
                               for s in sweeps},
            "failure_rate_by_policy": _by_policy(by, Run.failure_rate, 5),
            "kv_spread_by_policy": _by_policy(by, Run.kv_spread)}
