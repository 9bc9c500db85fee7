"""The router's own view of every backend: in-flight requests, EWMA latency and TTFT, an EWMA
error rate, and over a sliding window the p95 of TTFT and end-to-end latency, the failed
fraction, output tokens/s and a per-backend latency baseline. Updated at the I/O edge by
dispatch; read as immutable snapshots.

Each backend's counters are updated in place (``sent``, ``finished`` and ``prefill_ended``
change a few fields of one mutable record); ``snapshot`` publishes an immutable
``BackendStats`` per backend, rebuilt only for the backends that changed since the last
snapshot (the others' are reused). The window-derived fields and the TTFT model change only when a request ends, so
computing them at publication gives the values they had after that update.

Window: the requests that ended in the last ``WINDOW_S`` seconds, at most ``WINDOW_MAX``
of them (the oldest drop first). Quantiles use the nearest-rank method (the smallest sample
with at least q·n samples ≤ it; Hyndman & Fan 1996, definition 1), so every reported p95 is
a latency that really happened. The baseline is the lowest windowed p50 seen so far, taken
once the window holds ``BASELINE_MIN`` successful samples: the backend's latency when it
was least loaded, the reference the ``latency`` scorer compares the current p95 against.

Prefill: each attempt (``dispatch.Attempt``) reports when a request is sent to a backend
(``sent``, with its prompt tokens) and when its first token arrived (``prefill_ended``) or
the attempt ended (``finished`` with the ticket); in between its
prompt counts in the backend's ``prefill_tokens``, and each first token teaches the
backend's TTFT model (``anchor/sources/prefill.py``) that the ``expected-ttft`` scorer reads.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from llmroute.anchor.stats.prefill import PrefillFit
from llmroute.anchor.stats.window import Sample, Window, nearest_rank_sorted
from llmroute.types import (
    BackendStats,
    BreakerViews,
    EngineSignals,
    MetricsSnapshot,
    QualityView,
)

EWMA_ALPHA = 0.2
"""Weight of the newest sample in every EWMA (≈ the last 10 samples dominate)."""
WINDOW_S = 60.0
"""Sliding-window length in seconds."""
WINDOW_MAX = 256
"""Most samples kept per backend in the window."""
BASELINE_MIN = 5
"""Successful samples the window needs before its p50 may set the baseline."""

EngineReader = Callable[[float], Mapping[str, EngineSignals]]
"""``now -> {backend_id: fresh EngineSignals}`` (the signal store's ``fresh``)."""
DarkReader = Callable[[float], frozenset[str]]
"""``now -> backend ids whose signals are stale or whose poll is down`` (the store's ``dark``;
its ``hot``, the GPUs too hot for new requests, has the same shape)."""
QualityViews = Callable[[], Mapping[str, QualityView]]
"""``() -> {backend_id: QualityView}`` of the demoted backends (quality ejection)."""


class PrefillTicket(NamedTuple):
    """One request waiting for its first token: on ``backend_id``, ``tokens`` prompt tokens,
    ``ahead`` prompt tokens pending there when it was sent (its own included), sent at
    ``at`` (clock seconds). Immutable (a named tuple: the cheapest immutable record)."""

    backend_id: str
    tokens: int
    ahead: int
    at: float


def _ewma(old: float | None, sample: float, alpha: float = EWMA_ALPHA) -> float:
    return sample if old is None else old + alpha * (sample - old)


def nearest_rank(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank ``q``-quantile (0 < q ≤ 1) of ``values``; None when empty."""
    return nearest_rank_sorted(sorted(values), q)


def _baseline(old: float | None, ordered: list[float]) -> float | None:
    n = len(ordered)
    if n < BASELINE_MIN:
        return old
    p50 = ordered[(n + 1) // 2 - 1]  # the nearest-rank p50: rank ceil(n / 2)
    return p50 if old is None else min(old, p50)


_PUBLISHED = ("backend_id", "in_flight", "latency_ms", "ttft_ms", "error_rate", "taken_at",
              "ttft_p95_ms", "latency_p95_ms", "ttft_baseline_ms", "latency_baseline_ms",
              "window_error_rate", "output_tps", "window_requests", "prefill_tokens",
              "prefill_ms_per_token", "prefill_overhead_ms")
"""Every field of ``BackendStats``, in the order ``_publish`` gives their values."""
_SETTERS = tuple(getattr(BackendStats, name).__set__ for name in _PUBLISHED)
"""Their slot setters: ``_publish`` fills a new BackendStats through them, a quarter cheaper
than the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field)."""
_new = object.__new__


class _Live:
    """One backend's mutable record: the fields of ``BackendStats`` that are not derived
    from the window or the TTFT model (``in_flight``, ``prefill_tokens``, ``taken_at``, the
    EWMAs and the baselines), its ``window`` and TTFT model ``fit`` (None until its first
    request ends)."""

    __slots__ = ("backend_id", "in_flight", "prefill_tokens", "taken_at", "error_rate",
                 "latency_ms", "ttft_ms", "ttft_baseline_ms", "latency_baseline_ms", "window",
                 "fit")

    def __init__(self, backend_id: str) -> None:
        self.backend_id = backend_id
        self.in_flight = self.prefill_tokens = 0
        self.taken_at = self.error_rate = 0.0
        self.latency_ms: float | None = None
        self.ttft_ms: float | None = None
        self.ttft_baseline_ms: float | None = None
        self.latency_baseline_ms: float | None = None
        self.window: Window | None = None
        self.fit: PrefillFit | None = None


def _publish(live: _Live, remote: tuple[int, int] = (0, 0)) -> BackendStats:
    """``live`` as an immutable ``BackendStats``, with ``remote`` (the other replicas'
    in-flight requests and pending prefill tokens) added to its own."""
    fit, window = live.fit, live.window
    model = fit.model() if fit is not None else None
    overhead, per_token = model if model is not None else (None, None)
    ttft_p95, latency_p95, error_rate, tps, n = (
        window.summary() if window is not None else (None, None, None, None, 0))
    out = _new(BackendStats)
    for put, value in zip(_SETTERS, (
            live.backend_id, live.in_flight + remote[0], live.latency_ms, live.ttft_ms,
            live.error_rate, live.taken_at, ttft_p95, latency_p95, live.ttft_baseline_ms,
            live.latency_baseline_ms, error_rate, tps, n, live.prefill_tokens + remote[1],
            per_token, overhead)):
        put(out, value)
    return out


class RouterStats:
    """Per-backend counters owned by one router process (single event loop), updated in
    place; ``snapshot`` publishes them as immutable ``BackendStats``.

    ``engines``, ``breakers``, ``dark``, ``hot`` and ``quality`` (optional) read the fresh
    engine signals, the breaker views, the dark backends, the hot GPUs and the quality
    views that ``snapshot`` attaches."""

    def __init__(self, backend_ids: Iterable[str], engines: EngineReader | None = None,
                 breakers: BreakerViews | None = None, dark: DarkReader | None = None, *,
                 hot: DarkReader | None = None, quality: QualityViews | None = None):
        self._live = {b: _Live(b) for b in backend_ids}
        self._published = {b: _publish(live) for b, live in self._live.items()}
        self._changed: set[str] = set()  # backends whose published stats are out of date
        self._remote: dict[str, tuple[int, int]] = {}  # the other replicas' load
        self.engines, self.breakers, self.dark = engines, breakers, dark
        self.hot, self.quality = hot, quality

    @classmethod
    def for_backends(cls, backend_ids: list[str], engines: EngineReader | None = None,
                     breakers: BreakerViews | None = None,
                     dark: DarkReader | None = None, *, hot: DarkReader | None = None,
                     quality: QualityViews | None = None) -> RouterStats:
        """Empty stats for each backend id."""
        return cls(backend_ids, engines, breakers, dark, hot=hot, quality=quality)

    def sent(self, backend_id: str, tokens: int, now: float) -> PrefillTicket | None:
        """A request with ``tokens`` prompt tokens was sent to ``backend_id``: one more in
        flight, its prompt pending prefill there. Returns the ticket for ``prefill_ended``
        or ``finished`` (None, and nothing counted, for a backend these stats do not track)."""
        live = self._live.get(backend_id)
        if live is None:
            return None
        tokens = max(tokens, 1)
        live.in_flight += 1
        live.taken_at = now
        live.prefill_tokens += tokens
        self._changed.add(backend_id)
        return PrefillTicket(backend_id, tokens, live.prefill_tokens, now)

    def finished(self, backend_id: str, now: float, *, ok: bool,
                 latency_ms: float | None = None, ttft_ms: float | None = None,
                 output_tokens: int | None = None,
                 ticket: PrefillTicket | None = None) -> None:
        """A request on ``backend_id`` ended; ``latency_ms`` end-to-end, ``ttft_ms`` to the
        first token (streams only), ``output_tokens`` generated (when known). Failures
        update only the error rates. A ``ticket`` still pending ends here too, without a
        first token (``prefill_ended(ticket, now, first_token=False)``, in the same update).
        Raises KeyError for a backend these stats do not track."""
        if ticket is not None and ticket.backend_id != backend_id:  # not this backend's
            self.prefill_ended(ticket, now, first_token=False)
            ticket = None
        live = self._live[backend_id]
        window = live.window
        if window is None:
            window = live.window = Window(WINDOW_S, WINDOW_MAX)
        window.add(_sample(now, ok, latency_ms, ttft_ms, output_tokens), now)
        if live.in_flight > 0:
            live.in_flight -= 1
        live.taken_at = now
        live.error_rate = _ewma(live.error_rate, 0.0 if ok else 1.0)
        if ok and latency_ms is not None:
            live.latency_ms = _ewma(live.latency_ms, latency_ms)
        if ok and ttft_ms is not None:
            live.ttft_ms = _ewma(live.ttft_ms, ttft_ms)
        live.ttft_baseline_ms = _baseline(live.ttft_baseline_ms, window.ttfts)
        live.latency_baseline_ms = _baseline(live.latency_baseline_ms, window.latencies)
        if ticket is not None:
            _prefill_end(live, ticket, now, first_token=False)
        self._changed.add(backend_id)

    def prefill_ended(self, ticket: PrefillTicket | None, now: float, *,
                      first_token: bool) -> None:
        """The ticket's request got its first token (``first_token``: its TTFT teaches the
        backend's model) or ended without one there (failed over, refused, cancelled)."""
        if ticket is None:
            return
        _prefill_end(self._live[ticket.backend_id], ticket, now, first_token=first_token)
        self._changed.add(ticket.backend_id)

    def inherit(self, old: RouterStats, backend_ids: Iterable[str]) -> None:
        """Start ``backend_ids`` from what ``old`` learned of them (a reload keeping those
        backends unchanged): the EWMAs, error rate, baselines, the window and the TTFT model
        are copied, so nothing ``old`` records from now on changes these. The in-flight
        requests and pending prefill tokens are not: they belong to ``old``'s requests,
        which finish there (its drain counts them). Ids that either side does not track are
        skipped."""
        for b in backend_ids:
            src, dst = old._live.get(b), self._live.get(b)
            if src is None or dst is None:
                continue
            dst.taken_at, dst.error_rate = src.taken_at, src.error_rate
            dst.latency_ms, dst.ttft_ms = src.latency_ms, src.ttft_ms
            dst.ttft_baseline_ms = src.ttft_baseline_ms
            dst.latency_baseline_ms = src.latency_baseline_ms
            dst.window, dst.fit = copy.deepcopy(src.window), copy.deepcopy(src.fit)
            self._changed.add(b)

    def local_load(self) -> dict[str, tuple[int, int]]:
        """``{backend_id: (in_flight, prefill_tokens)}`` of this process alone (what it
        shares with the other replicas of a fleet)."""
        return {b: (live.in_flight, live.prefill_tokens) for b, live in self._live.items()}

    def set_remote(self, load: Mapping[str, tuple[int, int]]) -> None:
        """The other replicas' summed ``(in_flight, prefill_tokens)`` per backend id, added
        to this process's own in the stats published from the next ``snapshot`` on (a
        backend absent from ``load``: nothing added; ids these stats do not track are
        ignored). Only the backends whose remote load changed are republished."""
        old = self._remote
        new = {b: v for b, v in load.items() if b in self._live}
        for b in old.keys() | new.keys():
            if old.get(b) != new.get(b):
                self._changed.add(b)
        self._remote = new

    def snapshot(self, now: float) -> MetricsSnapshot:
        """An immutable copy of every backend's stats (and fresh engine signals) at ``now``,
        with the breaker views as they are (already immutable: a reference)."""
        engines = dict(self.engines(now)) if self.engines is not None else {}
        breakers = self.breakers() if self.breakers is not None else {}
        dark = self.dark(now) if self.dark is not None else frozenset()
        hot = self.hot(now) if self.hot is not None else frozenset()
        quality = self.quality() if self.quality is not None else {}
        if self._changed:
            remote = self._remote
            for b in self._changed:
                self._published[b] = _publish(self._live[b], remote.get(b, (0, 0)))
            self._changed.clear()
        return MetricsSnapshot(dict(self._published), now, engines, breakers, dark, hot,
                               quality)


def _prefill_end(live: _Live, ticket: PrefillTicket, now: float, *, first_token: bool
                 ) -> None:
    """``ticket``'s prompt is no longer pending; a first token teaches the TTFT model."""
    fit = live.fit
    if fit is None:
        fit = live.fit = PrefillFit()
    if first_token:
        fit.add(ticket.ahead, (now - ticket.at) * 1000.0)
    live.prefill_tokens = max(live.prefill_tokens - ticket.tokens, 0)


def _sample(now: float, ok: bool, latency_ms: float | None, ttft_ms: float | None,
            output_tokens: int | None) -> Sample:
    if not ok:
        return Sample(now, False)
    gen_s = None
    if latency_ms is not None:
        gen_s = (latency_ms - (ttft_ms or 0.0)) / 1000.0
    return Sample(now, True, latency_ms, ttft_ms, output_tokens, gen_s)
