"""Quality ejection: demote a backend whose answers are worse than its pool's, then probe it
back. Pure and synchronous over the tallies (``fuse/quality.py``) and the caller's clock;
the healing loop (``assemble/healing.py``) calls ``evaluate`` once per tick and acts on the
transitions (events, window resets). Gateways eject on errors and latency (Envoy's outlier
detection, LiteLLM's cooldowns, llmroute's breakers); this ejects on answer quality.

**The test** (``judge``), per backend against the rest of its pool — the other backends
of the pool that are healthy now, their windows summed — and only with at least
``min_answers`` answers on each side (a probing backend's own side excepted: see below):

* bad answers: a one-sided Fisher exact test (Fisher 1935; ``scipy.stats.fisher_exact``,
  ``alternative="greater"``) on the 2 × 2 table of bad and good answers, backend against
  the rest. It fires when p < ``alpha`` and the backend's bad fraction is at least
  ``min_gap`` above the rest's (an effect floor: with many answers a trivial difference is
  significant).
* entropy: a one-sided Welch t-test (Welch 1947; ``scipy.stats.ttest_ind_from_stats``,
  ``equal_var=False``) of the answers' mean token entropies, from the tallies' sums; it
  fires when p < ``alpha`` and the backend's mean is at least ``min_entropy_gap_nats``
  above the rest's. Only answers that carried logprobs count (``scored``).
* a sustained shift in bad answers: Page's CUSUM (Page 1954; ``fuse/quality.cusum``) over
  the backend's own answers in order, of the rate ``p1 = p0 + min_gap`` against the pool's
  ``p0`` (its bad fraction with one bad and one good answer added — Laplace's rule, never
  0); it fires when the statistic reaches ``h = ln(1/alpha)``. The window's tests above
  weigh every answer of the last ``window_s`` alike, so a backend with a long good past
  must give many bad answers before its bad fraction clears ``min_gap``; the CUSUM forgets
  the good past (it only holds the statistic at 0) and fires after a few bad answers in a
  row — each a fuse handoff, empty or truncated answer, ``ln(p1/p0)`` nats of evidence
  (about 5 with a pool of hundreds of clean answers: three in a row). It reads this
  replica's answers (the order of other replicas' answers is not shared).

**False-alarm rate.** Under the null (the backend's answers are as good as its pool's, the
answers independent), one evaluation fires with probability at most ``2·alpha`` for the
two window tests: Fisher's test is exact and conservative (its size is at most ``alpha``),
Welch's is approximately ``alpha`` for the sample sizes it runs at (``min_answers`` scored
answers at least; the central limit theorem on per-answer means). The CUSUM is the maximum
over start points of likelihood ratios that are martingales under the null with ``p0`` the
true rate, so by Ville's inequality each start point reaches ``1/alpha`` with probability at
most ``alpha`` and over ``N`` answers the CUSUM fires with probability at most ``N·alpha``
(Lorden 1971: its mean run length to a false alarm is at least ``1/alpha`` answers); the
pool's rate is estimated from hundreds of answers with Laplace's rule, which errs high
when the pool is clean. The loop evaluates each healthy backend once per tick (1 s), so
over an hour a backend that gives one answer a second is evaluated at most 3,600 times
and the chance of any false demotion is at most ``3·3,600·alpha`` (≤ 0.011 at the default
``alpha`` = 1e-6, by the union bound — consecutive windows share almost every answer, so
the real rate is far lower). Answers that are not independent (a burst of stalls hitting
one backend) are what the effect floors are for.

**The state machine** (``types.QualityState``; the share is the fraction of requests the
anchor still offers the backend, ``anchor/filters/quality.py``)::

    healthy --test fires--> cut (share cut_share) --cut_s later, test still fires-->
      ejected (share 0) --cool-off--> probing (share probe_share) --min_answers probes--
        --> healthy if the test stays quiet, else ejected again (cool-off doubled)
    cut --cut_s later, the test quiet--> healthy
    healthy or cut --the test fires at alpha² (overwhelming)--> ejected at once

The cut is a confirmation at a quarter of the traffic; when the evidence is overwhelming
(the test would fire at ``alpha²``: e.g. every answer handed off) there is nothing left to
confirm, and each answer the cut still sends it is a bad one, so the backend is ejected
at once (from healthy, or from cut before ``cut_s``). A probing backend is ejected again as
soon as the test fires on its probes, without waiting for ``min_answers`` of them (a
breaker's half-open state reopens on its first failed probe): each probe the fuse hands
off is an answer the client waited longer for.

The cool-off doubles with each ejection in a row (Envoy's outlier detection multiplies its
``base_ejection_time`` by the number of ejections), capped at ``max_cooloff_s``; a backend
that comes back healthy starts again from ``cooloff_s``. An ejection resets the backend's
window (the caller does it): the probes are judged on their own.

**Bounds.** A demotion (healthy → cut) is refused when afterwards more than
``max_pool_share`` of the pool's backends (at least one always stays healthy: a demotion
that would empty a pool is refused) or more than ``max_fleet_share`` of all backends would
be demoted (cut, ejected or probing). A refusal is a ``Transition`` with ``refused`` set,
reported once per stretch of a firing test.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from llmroute.fuse.quality import Tally, cusum
from llmroute.types import QualityState, QualityView

HEALTHY, PROBING, CUT, EJECTED = (QualityState.HEALTHY, QualityState.PROBING,
                                  QualityState.CUT, QualityState.EJECTED)
DEMOTED = frozenset((CUT, EJECTED, PROBING))
MIN_SD_NATS = 1e-3
"""Floor of a standard deviation in the Welch test (nats): identical entropies are not
infinitely certain."""


@dataclass(frozen=True, slots=True)
class Policy:
    """The settings (``config.QualityConfig``): the test's ``alpha`` (per evaluation and
    test), ``min_answers`` on each side, the effect floors ``min_gap`` (bad fraction 0–1)
    and ``min_entropy_gap_nats``; the shares (fractions 0–1) and times (s) of the states;
    the bounds ``max_pool_share`` and ``max_fleet_share`` (fractions 0–1)."""

    alpha: float = 1e-6
    min_answers: int = 10
    min_gap: float = 0.2
    min_entropy_gap_nats: float = 0.5
    cut_share: float = 0.25
    cut_s: float = 10.0
    cooloff_s: float = 30.0
    max_cooloff_s: float = 600.0
    probe_share: float = 0.1
    max_pool_share: float = 0.5
    max_fleet_share: float = 0.5


class Verdict(NamedTuple):
    """The test's answer: ``fires``, the ``evidence`` (counts, fractions, means, p-values,
    the CUSUM statistic) for the event that follows, and ``overwhelming``: it fires at
    ``alpha²`` too."""

    fires: bool
    evidence: dict[str, Any]
    overwhelming: bool = False


class Transition(NamedTuple):
    """A change of one backend's state at clock time ``at`` (s), ``why`` in words, with the
    test's ``evidence``; ``refused``: the test fired but the bounds kept it healthy."""

    backend_id: str
    old: QualityState
    new: QualityState
    at: float
    why: str
    evidence: dict[str, Any]
    refused: bool = False


@dataclass(slots=True)
class _Entry:
    state: QualityState = HEALTHY
    since: float = 0.0
    until: float = 0.0  # end of an ejection's cool-off
    ejections: int = 0  # in a row
    refused: bool = False  # a refusal already reported for this stretch


def load_tests() -> None:
    """Import SciPy's tests now (it takes seconds: call it off the event loop, before the
    first ``judge``, which otherwise imports it where it runs)."""
    import scipy.stats  # noqa: F401


def judge(own: Tally, rest: Tally, policy: Policy, run: Sequence[bool] = (),
          probe: bool = False) -> Verdict:
    """The test (module docstring) of ``own`` against ``rest``; ``run``: the backend's own
    answers in order as bad flags (the CUSUM's input; empty: no CUSUM); ``probe``: the
    backend is probing (its own side needs no ``min_answers``)."""
    evidence: dict[str, Any] = {
        "answers": own.answers, "bad": own.bad, "bad_ratio": _round(own.bad_ratio),
        "pool_answers": rest.answers, "pool_bad_ratio": _round(rest.bad_ratio),
        "entropy": _round(own.mean_entropy), "pool_entropy": _round(rest.mean_entropy)}
    if rest.answers < policy.min_answers or (own.answers < policy.min_answers and not probe):
        return Verdict(False, evidence)
    p_bad = _bad_p(own, rest, policy)
    p_entropy = _entropy_p(own, rest, policy)
    s = _cusum(run, rest, policy)
    evidence.update(p_bad=p_bad, p_entropy=p_entropy, cusum=_round(s),
                    cusum_h=_round(-math.log(policy.alpha)), alpha=policy.alpha)
    level = min(p for p in (p_bad, p_entropy, math.exp(-s), 1.0) if p is not None)
    return Verdict(level < policy.alpha, evidence, level < policy.alpha ** 2)


def _cusum(run: Sequence[bool], rest: Tally, policy: Policy) -> float:
    """The CUSUM statistic (nats) of ``run`` against the pool's Laplace-smoothed bad rate
    ``p0``, for ``p1 = p0 + min_gap`` (0 without a run or an effect floor)."""
    p0 = (rest.bad + 1) / (rest.answers + 2)
    p1 = min(p0 + policy.min_gap, 0.999)
    return cusum(run, p0, p1) if run and p1 > p0 else 0.0


def _bad_p(own: Tally, rest: Tally, policy: Policy) -> float | None:
    """Fisher's one-sided p of ``own``'s bad fraction above ``rest``'s (None below the
    effect floor)."""
    if (own.bad_ratio or 0.0) - (rest.bad_ratio or 0.0) < policy.min_gap:
        return None
    from scipy.stats import fisher_exact  # here: SciPy takes seconds to import

    table = [[own.bad, own.answers - own.bad], [rest.bad, rest.answers - rest.bad]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def _entropy_p(own: Tally, rest: Tally, policy: Policy) -> float | None:
    """Welch's one-sided p of ``own``'s mean entropy above ``rest``'s (None below the
    effect floor or with fewer than ``min_answers`` scored answers on a side)."""
    if own.scored < policy.min_answers or rest.scored < policy.min_answers:
        return None
    mine, theirs = own.mean_entropy or 0.0, rest.mean_entropy or 0.0
    if mine - theirs < policy.min_entropy_gap_nats:
        return None
    from scipy.stats import ttest_ind_from_stats  # here: SciPy takes seconds to import

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p = ttest_ind_from_stats(mine, max(own.entropy_sd, MIN_SD_NATS), own.scored, theirs,
                                 max(rest.entropy_sd, MIN_SD_NATS), rest.scored,
                                 equal_var=False, alternative="greater").pvalue
    return float(p) if math.isfinite(p) else None


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


@dataclass
class Ejector:
    """The state of every backend of ``pools`` (``{pool: (backend_id, …)}``) under
    ``policy``; ``views`` is what the anchor reads (replaced, never changed, on each
    transition; healthy backends are absent)."""

    policy: Policy
    pools: Mapping[str, tuple[str, ...]]
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _views: Mapping[str, QualityView] = field(default_factory=lambda: MappingProxyType({}))

    def views(self) -> Mapping[str, QualityView]:
        """``{backend_id: QualityView}`` of the demoted backends (read-only)."""
        return self._views

    def state(self, backend_id: str) -> QualityState:
        """The backend's state (healthy when unknown)."""
        entry = self._entries.get(backend_id)
        return HEALTHY if entry is None else entry.state

    def track(self, pools: Mapping[str, tuple[str, ...]]) -> None:
        """Judge these pools from now on (a reload changed the backends); the states of the
        backends that stay are kept, the others forgotten."""
        self.pools = pools
        keep = {b for members in pools.values() for b in members}
        self._entries = {b: e for b, e in self._entries.items() if b in keep}
        self._publish()

    def evaluate(self, tallies: Mapping[str, Tally], now: float,
                 runs: Mapping[str, Sequence[bool]] | None = None) -> list[Transition]:
        """One tick at ``now`` (s) over the windows' ``tallies`` and this replica's ``runs``
        (``QualityTracker.runs``: each backend's answers in order as bad flags, for the
        CUSUM; None: none); the transitions made."""
        out: list[Transition] = []
        runs = runs or {}
        for pool, members in self.pools.items():
            for bid in members:
                step = self._step(pool, bid, tallies, runs.get(bid, ()), now)
                if step is not None:
                    out.append(step)
        if any(not t.refused for t in out):
            self._publish()
        return out

    def _step(self, pool: str, bid: str, tallies: Mapping[str, Tally], run: Sequence[bool],
              now: float) -> Transition | None:
        entry = self._entries.setdefault(bid, _Entry(since=now))
        state = entry.state
        if state is EJECTED:
            return self._move(bid, entry, PROBING, now, "cool-off over", {}) \
                if now >= entry.until else None
        verdict = judge(tallies.get(bid, Tally()), self._rest(pool, bid, tallies), self.policy,
                        run, probe=state is PROBING)
        if state is HEALTHY:
            return self._healthy(pool, bid, entry, verdict, now)
        if state is CUT:
            return self._cut(bid, entry, verdict, now)
        return self._probed(bid, entry, verdict, now)

    def _cut(self, bid: str, entry: _Entry, verdict: Verdict, now: float
             ) -> Transition | None:
        if verdict.overwhelming:
            return self._eject(bid, entry, verdict, now)
        if now - entry.since < self.policy.cut_s:
            return None
        return self._eject(bid, entry, verdict, now) if verdict.fires else \
            self._move(bid, entry, HEALTHY, now, "the test is quiet again", verdict.evidence)

    def _healthy(self, pool: str, bid: str, entry: _Entry, verdict: Verdict, now: float
                 ) -> Transition | None:
        if not verdict.fires:
            entry.refused = False
            return None
        bound = self._bound(pool)
        if bound is None and verdict.overwhelming:
            return self._eject(bid, entry, verdict, now, "answers far worse than the pool's")
        if bound is None:
            return self._move(bid, entry, CUT, now, "answers worse than the pool's",
                              verdict.evidence)
        if entry.refused:
            return None
        entry.refused = True
        return Transition(bid, HEALTHY, HEALTHY, now, bound, verdict.evidence, refused=True)

    def _probed(self, bid: str, entry: _Entry, verdict: Verdict, now: float
                ) -> Transition | None:
        if verdict.fires:
            return self._eject(bid, entry, verdict, now)
        if verdict.evidence["answers"] < self.policy.min_answers:
            return None
        entry.ejections = 0
        return self._move(bid, entry, HEALTHY, now, "probes as good as the pool's",
                          verdict.evidence)

    def _eject(self, bid: str, entry: _Entry, verdict: Verdict, now: float,
               why: str = "answers still worse than the pool's") -> Transition:
        p = self.policy
        cooloff = min(p.cooloff_s * 2 ** min(entry.ejections, 30), p.max_cooloff_s)
        entry.ejections += 1
        entry.until = now + cooloff
        evidence = {**verdict.evidence, "cooloff_s": cooloff}
        return self._move(bid, entry, EJECTED, now, why, evidence)

    def _move(self, bid: str, entry: _Entry, new: QualityState, now: float, why: str,
              evidence: dict[str, Any]) -> Transition:
        old, entry.state, entry.since = entry.state, new, now
        return Transition(bid, old, new, now, why, evidence)

    def _rest(self, pool: str, bid: str, tallies: Mapping[str, Tally]) -> Tally:
        """The summed tallies of ``pool``'s other healthy backends."""
        rest = Tally()
        for other in self.pools[pool]:
            if other != bid and self.state(other) is HEALTHY and other in tallies:
                rest = rest.plus(tallies[other])
        return rest

    def _bound(self, pool: str) -> str | None:
        """Why one more demotion in ``pool`` is refused (None: allowed)."""
        members = self.pools[pool]
        demoted = sum(self.state(b) in DEMOTED for b in members)
        if demoted + 1 >= len(members):
            return f"refused: demoting it would leave pool {pool} no healthy backend"
        if demoted + 1 > math.floor(self.policy.max_pool_share * len(members)):
            return (f"refused: pool {pool} may have at most "
                    f"{self.policy.max_pool_share:.0%} of its backends demoted")
        fleet = [b for ms in self.pools.values() for b in ms]
        if sum(self.state(b) in DEMOTED for b in fleet) + 1 > math.floor(
                self.policy.max_fleet_share * len(fleet)):
            return (f"refused: at most {self.policy.max_fleet_share:.0%} of all backends "
                    "may be demoted")
        return None

    def _publish(self) -> None:
        p = self.policy
        shares = {CUT: p.cut_share, EJECTED: 0.0, PROBING: p.probe_share}
        self._views = MappingProxyType({
            b: QualityView(e.state, shares[e.state], e.since)
            for b, e in self._entries.items() if e.state is not HEALTHY})
