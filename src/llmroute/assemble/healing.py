"""The healing loop: quality ejection wired to the router.

``Healing`` holds the answer windows (``fuse/quality.py``) and the ejector
(``fuse/ejection.py``). The observer hands it every finished trace (``observe``: the
trace's answers, good or bad, go into their backends' windows — after the answer was sent,
one pass over the trace's steps); the relay tells it of each handoff as it happens
(``melted``: the melted answer is counted at once, seconds before the continuation that
replaced it ends, and left out when the trace comes), and every ``tick_s`` seconds ``tick`` runs the ejector
over the windows' tallies — the fleet's, when the replicas share them (``state/load.py``
with the ``quality`` key) — resets the window of each backend it ejects and turns each
transition into an event (``observe/quality.py``: log line, counters, audit record). The
anchor reads the resulting views from its snapshot (``RouterStats`` → ``quality``
filter), never this object. A reload keeps the windows and states of the backends that
stay (``track``).

A replica that loses the shared store judges on its own answers (the others' tallies are
cleared, ``FleetLoad``) and converges with the fleet once it is back: every replica runs
the same test over the same summed tallies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from llmroute.config.quality import QualityConfig
from llmroute.fuse.ejection import Ejector, Policy, Transition, load_tests
from llmroute.fuse.quality import QualityTracker
from llmroute.observe.quality import QualityEvents, answers_of
from llmroute.observe.trace import Recorder, Trace
from llmroute.types import Answer, QualityState, QualityView


def policy_of(cfg: QualityConfig) -> Policy:
    """The ejector's Policy from the ``quality:`` section."""
    return Policy(cfg.alpha, cfg.min_answers, cfg.min_gap, cfg.min_entropy_gap_nats,
                  cfg.cut_share, cfg.cut_s, cfg.cooloff_s, cfg.max_cooloff_s,
                  cfg.probe_share, cfg.max_pool_share, cfg.max_fleet_share)


class Healing:
    """Quality ejection for the backends of ``pools`` (``{pool: (backend_id, …)}``) under
    ``cfg``; ``clock`` is monotonic seconds; ``events`` takes every transition."""

    def __init__(self, cfg: QualityConfig, pools: Mapping[str, tuple[str, ...]],
                 clock: Callable[[], float], events: QualityEvents):
        self.cfg, self.clock, self.events = cfg, clock, events
        self.tracker = QualityTracker(cfg.window_s, cfg.window_max)
        self.ejector = Ejector(policy_of(cfg), dict(pools))
        self._pool_of = {b: p for p, members in pools.items() for b in members}
        self.ticks = 0
        self.melts_live = False  # True once the relay reports handoffs (``melted``)

    def observe(self, trace: Trace, rec: Recorder) -> None:
        """A finished request: its answers into their backends' windows (the observer's
        ``on_finish`` hook; nothing when quality ejection is off) — but for the handed-off
        ones when ``melted`` already counted them."""
        if not self.cfg.enabled:
            return
        answers = answers_of(trace, rec.answer, self.clock(), self._pool_of)
        if self.melts_live:
            answers = [a for a in answers if a.bad != "handoff"]
        self.tracker.record(answers)

    def melted(self, backend_id: str, entropy: float | None) -> None:
        """The relay handed a stream off from ``backend_id`` after it had streamed
        (``Deps.melted``; ``entropy``: the leg's mean token entropy, nats, or None): one
        bad answer of it, counted now."""
        if self.cfg.enabled:
            self.tracker.record([Answer(backend_id, self.clock(), "handoff", entropy)])

    def views(self) -> Mapping[str, QualityView]:
        """The demoted backends' views (what ``RouterStats`` attaches to snapshots)."""
        return self.ejector.views()

    def track(self, pools: Mapping[str, tuple[str, ...]]) -> None:
        """A reload: judge these pools from now on."""
        self.ejector.track(dict(pools))
        self._pool_of = {b: p for p, members in pools.items() for b in members}

    def tick(self) -> list[Transition]:
        """One evaluation now: the ejector over the tallies, the ejected backends' windows
        reset, every transition emitted; returns the transitions."""
        now = self.clock()
        self.ticks += 1
        moves = self.ejector.evaluate(self.tracker.tallies(now), now, self.tracker.runs())
        for t in moves:
            if t.new is QualityState.EJECTED:
                self.tracker.reset(t.backend_id)
            self.events.emit(t.backend_id, t.old.value, t.new.value, t.why, t.evidence,
                             t.refused)
        return moves

    async def run(self) -> None:
        """``tick`` every ``tick_s`` seconds until cancelled (nothing when off); SciPy's
        tests are imported first, in a worker thread (seconds that must not stall the
        requests on the event loop)."""
        if not self.cfg.enabled:
            return
        await asyncio.to_thread(load_tests)
        while True:
            await asyncio.sleep(self.cfg.tick_s)
            self.tick()

    def report(self) -> dict[str, dict[str, Any]]:
        """Per backend of the pools: ``{"state", "share", "since", "answers", "bad",
        "bad_ratio", "entropy", "reasons"}`` now (``/debug/backends``, the gauges)."""
        now = self.clock()
        tallies, views = self.tracker.tallies(now), self.views()
        out: dict[str, dict[str, Any]] = {}
        for members in self.ejector.pools.values():
            for bid in members:
                t, view = tallies.get(bid), views.get(bid)
                out[bid] = {
                    "state": view.state.value if view else "healthy",
                    "share": view.share if view else 1.0,
                    "since_s": None if view is None else round(now - view.since, 3),
                    "answers": t.answers if t else 0, "bad": t.bad if t else 0,
                    "bad_ratio": t.bad_ratio if t else None,
                    "entropy": t.mean_entropy if t else None,
                    "reasons": {r: getattr(t, r) for r in ("handoff", "empty", "truncated",
                                                           "verify")} if t else {}}
        return out
