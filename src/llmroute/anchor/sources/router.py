"""The router's own view of every backend: in-flight requests, EWMA latency and TTFT, and an
EWMA error rate. Updated at the I/O edge by the pipeline; read as immutable snapshots."""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmroute.types import BackendStats, MetricsSnapshot

EWMA_ALPHA = 0.2
"""Weight of the newest sample in every EWMA (≈ the last 10 samples dominate)."""


def _ewma(old: float | None, sample: float, alpha: float = EWMA_ALPHA) -> float:
    return sample if old is None else old + alpha * (sample - old)


@dataclass
class RouterStats:
    """Mutable per-backend counters owned by one router process (single event loop)."""

    _stats: dict[str, BackendStats]

    @classmethod
    def for_backends(cls, backend_ids: list[str]) -> RouterStats:
        """Empty stats for each backend id."""
        return cls({b: BackendStats(b) for b in backend_ids})

    def started(self, backend_id: str, now: float) -> None:
        """A request was sent to ``backend_id``."""
        s = self._stats[backend_id]
        self._stats[backend_id] = replace(s, in_flight=s.in_flight + 1, taken_at=now)

    def finished(self, backend_id: str, now: float, *, ok: bool,
                 latency_ms: float | None = None, ttft_ms: float | None = None) -> None:
        """A request on ``backend_id`` ended; ``latency_ms`` end-to-end, ``ttft_ms`` to the
        first token (streams only). Failures update only the error rate."""
        s = self._stats[backend_id]
        s = replace(s, in_flight=max(s.in_flight - 1, 0), taken_at=now,
                    error_rate=_ewma(s.error_rate, 0.0 if ok else 1.0))
        if ok and latency_ms is not None:
            s = replace(s, latency_ms=_ewma(s.latency_ms, latency_ms))
        if ok and ttft_ms is not None:
            s = replace(s, ttft_ms=_ewma(s.ttft_ms, ttft_ms))
        self._stats[backend_id] = s

    def snapshot(self, now: float) -> MetricsSnapshot:
        """An immutable copy of every backend's stats at ``now``."""
        return MetricsSnapshot(dict(self._stats), taken_at=now)
