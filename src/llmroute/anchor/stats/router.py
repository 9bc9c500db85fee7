"""The router's own view of every backend: in-flight requests, EWMA latency and TTFT, an EWMA
error rate, and over a sliding window the p95 of TTFT and end-to-end latency, the failed
fraction, output tokens/s and a per-backend latency baseline. Updated at the I/O edge by
dispatch; read as immutable snapshots.

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

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields

from llmroute.anchor.stats.prefill import PrefillFit
from llmroute.anchor.stats.window import Sample, Window, nearest_rank_sorted
from llmroute.types import BackendStats, BreakerViews, EngineSignals, MetricsSnapshot

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
"""``now -> backend ids whose signals are stale or whose poll is down`` (the store's ``dark``)."""


@dataclass(frozen=True, slots=True)
class PrefillTicket:
    """One request waiting for its first token: on ``backend_id``, ``tokens`` prompt tokens,
    ``ahead`` prompt tokens pending there when it was sent (its own included), sent at
    ``at`` (clock seconds)."""

    backend_id: str
    tokens: int
    ahead: int
    at: float


_FIELDS = tuple(f.name for f in fields(BackendStats))
_INDEX = {name: i for i, name in enumerate(_FIELDS)}
_values = operator.attrgetter(*_FIELDS)
_SETTERS = tuple(getattr(BackendStats, name).__set__ for name in _FIELDS)
_new = object.__new__


def _evolve(s: BackendStats, **changes: object) -> BackendStats:
    """``dataclasses.replace(s, **changes)`` without ``__init__``'s per-field machinery: all
    fields read in one C call and written through their slot descriptors, then the changed
    ones overwritten (every request makes two or three). Raises KeyError for a name that is
    not a field."""
    out = _new(BackendStats)
    for put, value in zip(_SETTERS, _values(s)):
        put(out, value)
    for name, value in changes.items():
        _SETTERS[_INDEX[name]](out, value)
    return out


def _ewma(old: float | None, sample: float, alpha: float = EWMA_ALPHA) -> float:
    return sample if old is None else old + alpha * (sample - old)


def nearest_rank(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank ``q``-quantile (0 < q ≤ 1) of ``values``; None when empty."""
    return nearest_rank_sorted(sorted(values), q)


def window_fields(s: BackendStats, window: Window) -> dict[str, float | int | None]:
    """The window-derived fields of ``s``, read from ``window`` (for one ``replace``)."""
    return dict(
        window_requests=len(window), window_error_rate=window.error_rate(),
        ttft_p95_ms=nearest_rank_sorted(window.ttfts, 0.95),
        latency_p95_ms=nearest_rank_sorted(window.latencies, 0.95),
        ttft_baseline_ms=_baseline(s.ttft_baseline_ms, window.ttfts),
        latency_baseline_ms=_baseline(s.latency_baseline_ms, window.latencies),
        output_tps=window.output_tps())


def _baseline(old: float | None, ordered: list[float]) -> float | None:
    if len(ordered) < BASELINE_MIN:
        return old
    p50 = nearest_rank_sorted(ordered, 0.5)
    return p50 if old is None or p50 is None else min(old, p50)


@dataclass
class RouterStats:
    """Mutable per-backend counters owned by one router process (single event loop).

    ``engines``, ``breakers`` and ``dark`` (optional) read the fresh engine signals, the
    breaker views and the dark backends that ``snapshot`` attaches."""

    _stats: dict[str, BackendStats]
    engines: EngineReader | None = None
    _windows: dict[str, Window] = field(default_factory=dict)
    _prefill: dict[str, PrefillFit] = field(default_factory=dict)
    breakers: BreakerViews | None = None
    dark: DarkReader | None = None

    @classmethod
    def for_backends(cls, backend_ids: list[str], engines: EngineReader | None = None,
                     breakers: BreakerViews | None = None,
                     dark: DarkReader | None = None) -> RouterStats:
        """Empty stats for each backend id."""
        return cls({b: BackendStats(b) for b in backend_ids}, engines, breakers=breakers,
                   dark=dark)

    def sent(self, backend_id: str, tokens: int, now: float) -> PrefillTicket | None:
        """A request with ``tokens`` prompt tokens was sent to ``backend_id``: one more in
        flight, its prompt pending prefill there. Returns the ticket for ``prefill_ended``
        or ``finished`` (None, and nothing counted, for a backend these stats do not track)."""
        s = self._stats.get(backend_id)
        if s is None:
            return None
        tokens = max(tokens, 1)
        self._stats[backend_id] = _evolve(s, in_flight=s.in_flight + 1, taken_at=now,
                                          prefill_tokens=s.prefill_tokens + tokens)
        return PrefillTicket(backend_id, tokens, s.prefill_tokens + tokens, now)

    def finished(self, backend_id: str, now: float, *, ok: bool,
                 latency_ms: float | None = None, ttft_ms: float | None = None,
                 output_tokens: int | None = None,
                 ticket: PrefillTicket | None = None) -> None:
        """A request on ``backend_id`` ended; ``latency_ms`` end-to-end, ``ttft_ms`` to the
        first token (streams only), ``output_tokens`` generated (when known). Failures
        update only the error rates. A ``ticket`` still pending ends here too, without a
        first token (``prefill_ended(ticket, now, first_token=False)``, in the same update)."""
        if ticket is not None and ticket.backend_id != backend_id:  # not this backend's
            self.prefill_ended(ticket, now, first_token=False)
            ticket = None
        s = self._stats[backend_id]
        window = self._slide(backend_id, now, _sample(now, ok, latency_ms, ttft_ms,
                                                      output_tokens))
        prefill = ({} if ticket is None
                   else self._prefill_end(s, ticket, now, first_token=False))
        self._stats[backend_id] = _evolve(
            s, in_flight=max(s.in_flight - 1, 0), taken_at=now,
            error_rate=_ewma(s.error_rate, 0.0 if ok else 1.0),
            latency_ms=_ewma(s.latency_ms, latency_ms) if ok and latency_ms is not None
            else s.latency_ms,
            ttft_ms=_ewma(s.ttft_ms, ttft_ms) if ok and ttft_ms is not None else s.ttft_ms,
            **window_fields(s, window), **prefill)

    def prefill_ended(self, ticket: PrefillTicket | None, now: float, *,
                      first_token: bool) -> None:
        """The ticket's request got its first token (``first_token``: its TTFT teaches the
        backend's model) or ended without one there (failed over, refused, cancelled)."""
        if ticket is None:
            return
        s = self._stats[ticket.backend_id]
        self._stats[ticket.backend_id] = _evolve(
            s, **self._prefill_end(s, ticket, now, first_token=first_token))

    def _prefill_end(self, s: BackendStats, ticket: PrefillTicket, now: float, *,
                     first_token: bool) -> dict[str, float | int | None]:
        """The fields ``ticket``'s end changes: pending tokens, the refitted TTFT model."""
        fit = self._prefill.setdefault(ticket.backend_id, PrefillFit())
        if first_token:
            fit.add(ticket.ahead, (now - ticket.at) * 1000.0)
        model = fit.model()
        overhead, per_token = model if model is not None else (None, None)
        return {"prefill_tokens": max(s.prefill_tokens - ticket.tokens, 0),
                "prefill_overhead_ms": overhead, "prefill_ms_per_token": per_token}

    def _slide(self, backend_id: str, now: float, sample: Sample) -> Window:
        window = self._windows.get(backend_id)
        if window is None:
            window = self._windows[backend_id] = Window(WINDOW_S, WINDOW_MAX)
        window.add(sample, now)
        return window

    def snapshot(self, now: float) -> MetricsSnapshot:
        """An immutable copy of every backend's stats (and fresh engine signals) at ``now``,
        with the breaker views as they are (already immutable: a reference)."""
        engines = dict(self.engines(now)) if self.engines is not None else {}
        breakers = self.breakers() if self.breakers is not None else {}
        dark = self.dark(now) if self.dark is not None else frozenset()
        return MetricsSnapshot(dict(self._stats), now, engines, breakers, dark)


def _sample(now: float, ok: bool, latency_ms: float | None, ttft_ms: float | None,
            output_tokens: int | None) -> Sample:
    if not ok:
        return Sample(now, False)
    gen_s = None
    if latency_ms is not None:
        gen_s = (latency_ms - (ttft_ms or 0.0)) / 1000.0
    return Sample(now, True, latency_ms, ttft_ms, output_tokens, gen_s)
