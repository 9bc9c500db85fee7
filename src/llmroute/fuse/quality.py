"""Answer quality per backend over a sliding window: the evidence quality ejection judges
(``fuse/ejection.py``).

Each answer (``types.Answer``) a backend gives is kept for ``window_s`` seconds, at most
``window_max`` of them (the oldest drop first), and summed into a ``Tally``: answers, bad
answers (and why: handed off by the fuse, empty, truncated, failed by a verifier) and the
sums of their mean token entropies (nats) and of their squares — the sufficient statistics
of the tests, so the tallies of several replicas simply add (``state/load.py`` shares them)
and the two-sample tests never scan a window. The order of a backend's own answers feeds the
sequential test (``cusum``: Page's CUSUM over its bad answers, one pass over the window a
tick). Pure and synchronous; the caller's clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from llmroute.types import Answer

REASONS = ("handoff", "empty", "truncated", "verify")
"""Why an answer is bad, in the order ``Tally`` counts them."""


class Tally(NamedTuple):
    """Sufficient statistics of one backend's window: ``answers``, ``bad`` ones, each
    ``REASONS`` count, and over the ``scored`` answers that had a mean token entropy, the
    sum (``entropy_sum``, nats) and sum of squares (``entropy_sq``) of those means."""

    answers: int = 0
    bad: int = 0
    handoff: int = 0
    empty: int = 0
    truncated: int = 0
    verify: int = 0
    scored: int = 0
    entropy_sum: float = 0.0
    entropy_sq: float = 0.0

    def plus(self, other: Tally | Iterable[float]) -> Tally:
        """Field-wise sum (another replica's window, or a ``Tally`` as a plain list)."""
        return Tally(*(a + b for a, b in zip(self, other)))

    def minus(self, other: Tally) -> Tally:
        """Field-wise difference (an answer leaving the window)."""
        return Tally(*(a - b for a, b in zip(self, other)))

    @property
    def bad_ratio(self) -> float | None:
        """Bad answers per answer (0–1); None with none."""
        return self.bad / self.answers if self.answers else None

    @property
    def mean_entropy(self) -> float | None:
        """Mean of the answers' mean token entropies (nats); None with none scored."""
        return self.entropy_sum / self.scored if self.scored else None

    @property
    def entropy_sd(self) -> float:
        """Sample standard deviation of the answers' mean entropies (nats; 0 below two)."""
        n = self.scored
        if n < 2:
            return 0.0
        var = (self.entropy_sq - self.entropy_sum ** 2 / n) / (n - 1)
        return math.sqrt(max(var, 0.0))


def cusum(bad: Iterable[bool], p0: float, p1: float) -> float:
    """Page's CUSUM (Page 1954, "Continuous inspection schemes", Biometrika 41) of the
    log-likelihood ratio of a bad-answer rate ``p1`` against ``p0`` (0 < p0 < p1 < 1) over
    ``bad`` (one flag per answer, oldest first): S₀ = 0, Sₙ = max(0, Sₙ₋₁ + ℓ(xₙ)) with
    ℓ(bad) = ln(p1/p0) and ℓ(good) = ln((1−p1)/(1−p0)); returns the last Sₙ (nats). A
    stretch of answers at rate ``p1`` drives it up whatever good answers came before it
    (they only hold it at 0)."""
    up, down = math.log(p1 / p0), math.log((1.0 - p1) / (1.0 - p0))
    s = 0.0
    for flag in bad:
        s = max(0.0, s + (up if flag else down))
    return s


def tally_of(answer: Answer) -> Tally:
    """The one-answer Tally of ``answer``."""
    bad = answer.bad
    h = answer.entropy
    scored = h is not None and math.isfinite(h)
    return Tally(1, bad is not None, bad == "handoff", bad == "empty", bad == "truncated",
                 bad == "verify", int(scored), h if scored else 0.0,
                 h * h if scored else 0.0)  # type: ignore[operator]


class Window:
    """One backend's answers of the last ``window_s`` seconds (at most ``window_max``) and
    their running sums (``tally``). Adding or dropping an answer changes a few of the sums
    in place (the request path adds one per answer: a few hundred nanoseconds)."""

    def __init__(self, window_s: float, window_max: int):
        self._window_s, self._max = window_s, window_max
        self._items: deque[Answer] = deque()
        self._sums = [0] * 6 + [0.0, 0.0]  # answers, bad, by reason ×4, entropy sum, sq
        self._scored = 0

    @property
    def tally(self) -> Tally:
        """The window's sums as a ``Tally``."""
        n, bad, handoff, empty, truncated, verify, h, sq = self._sums
        return Tally(n, bad, handoff, empty, truncated, verify, self._scored, h, sq)

    def add(self, answer: Answer) -> None:
        """Count ``answer`` in; the oldest beyond ``window_max`` drop out."""
        self._items.append(answer)
        self._count(answer, 1)
        if len(self._items) > self._max:
            self._count(self._items.popleft(), -1)

    def flags(self) -> list[bool]:
        """Whether each answer in the window is bad, oldest first."""
        return [a.bad is not None for a in self._items]

    def trim(self, now: float) -> Tally:
        """Drop the answers older than ``window_s`` at ``now``; the tally left."""
        horizon, items = now - self._window_s, self._items
        while items and items[0].at < horizon:
            self._count(items.popleft(), -1)
        if not items:  # no float residue once the window is empty
            self._sums, self._scored = [0] * 6 + [0.0, 0.0], 0
        return self.tally

    def _count(self, a: Answer, sign: int) -> None:
        sums = self._sums
        sums[0] += sign
        if a.bad is not None:
            sums[1] += sign
            i = _REASON.get(a.bad)
            if i is not None:
                sums[i] += sign
        h = a.entropy
        if h is not None and math.isfinite(h):
            self._scored += sign
            sums[6] += sign * h
            sums[7] += sign * h * h


_REASON = {r: 2 + i for i, r in enumerate(REASONS)}
"""A bad answer's reason → its index in ``Window._sums``."""


class QualityTracker:
    """The windows of every backend (``window_s`` seconds, at most ``window_max`` answers
    each), and the other replicas' tallies (``set_remote``), added to this one's in
    ``tallies``. Also ``local_load``/``set_remote``, the shape ``state.load.FleetLoad``
    shares."""

    def __init__(self, window_s: float = 120.0, window_max: int = 512):
        self._window_s, self._max = window_s, window_max
        self._windows: dict[str, Window] = {}
        self._remote: dict[str, Tally] = {}

    def record(self, answers: Iterable[Answer]) -> None:
        """Count ``answers`` in their backends' windows."""
        for a in answers:
            window = self._windows.get(a.backend_id)
            if window is None:
                window = self._windows[a.backend_id] = Window(self._window_s, self._max)
            window.add(a)

    def reset(self, backend_id: str) -> None:
        """Forget ``backend_id``'s answers (it was ejected: its probes start afresh)."""
        self._windows.pop(backend_id, None)
        self._remote.pop(backend_id, None)

    def local(self, now: float) -> dict[str, Tally]:
        """This replica's tally per backend at ``now`` (windows trimmed)."""
        return {b: w.trim(now) for b, w in self._windows.items()}

    def runs(self) -> dict[str, list[bool]]:
        """This replica's answers per backend as bad flags, oldest first (the windows as
        the last ``local``/``tallies`` trimmed them): what ``cusum`` reads."""
        return {b: w.flags() for b, w in self._windows.items()}

    def tallies(self, now: float) -> dict[str, Tally]:
        """This replica's tallies plus the other replicas' (``set_remote``), per backend."""
        out = self.local(now)
        for b, t in self._remote.items():
            out[b] = out.get(b, Tally()).plus(t)
        return out

    def local_load(self) -> dict[str, list[float]]:
        """``{backend_id: tally as a list}`` of this replica (what it shares)."""
        return {b: list(w.tally) for b, w in self._windows.items() if w.tally.answers}

    def set_remote(self, load: Mapping[str, Iterable[float]]) -> None:
        """The other replicas' summed tallies per backend (replaces the previous ones)."""
        self._remote = {b: Tally().plus(v) for b, v in load.items()}
