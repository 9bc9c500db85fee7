"""What the signal store keeps per backend beyond the last poll: the thermal latch (which
GPUs are too hot for new requests, with hysteresis) and the network readings' running
median. Both are updated once per good poll (``SignalStore.record_ok``), never per request.

**Thermal latch.** A backend turns *hot* when a poll reads its GPU at or above
``limit_c`` (78 °C by default: seed 002 §2.5 steers away from GPUs near 78 °C; NVIDIA's
data-centre parts start clock throttling in the low-to-mid 80s) and stays hot until a poll
reads it at or below ``limit_c − hysteresis_c`` (3 °C by default), so a GPU hovering at the
limit does not flap in and out of rotation with every poll (a Schmitt trigger). A poll
without a temperature (not exposed, or rejected as nonsense) leaves the latch as it was,
and the latch counts only while its last real reading is at most ``stale_after_s`` old: a
sensor that stops answering never keeps a backend out.

**Network readings.** ``net_rtt_ms`` and ``net_bytes_per_s`` of one poll are noisy (a
garbage-collector pause or a busy event loop lands in one of them), so the store keeps the
median of each backend's last ``NET_SAMPLES`` readings (the median ignores up to two
outliers of five).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import replace

from llmroute.types import EngineSignals

LIMIT_C = 78.0
"""Default temperature (°C) at or above which a GPU takes no new requests while another
backend can (seed 002 §2.5)."""
HYSTERESIS_C = 3.0
"""Default degrees (°C) below the limit a hot GPU must cool to before it takes requests."""
NET_SAMPLES = 5
"""Readings per backend the network median is taken over."""


class ThermalLatch:
    """Which backends are hot (module docstring): ``limit_c`` and ``hysteresis_c`` in °C
    (``hysteresis_c`` ≥ 0)."""

    def __init__(self, limit_c: float = LIMIT_C, hysteresis_c: float = HYSTERESIS_C):
        self.limit_c, self.hysteresis_c = limit_c, hysteresis_c
        self._hot: dict[str, float] = {}  # backend id → clock time of its last reading

    def update(self, backend_id: str, celsius: float | None, now: float) -> bool | None:
        """Apply one poll's reading taken at ``now`` (s); returns True when the backend
        turned hot, False when it cooled, None when nothing changed."""
        if celsius is None:
            return None
        was = backend_id in self._hot
        if celsius >= self.limit_c or (was and celsius > self.limit_c - self.hysteresis_c):
            self._hot[backend_id] = now
            return None if was else True
        self._hot.pop(backend_id, None)
        return False if was else None

    def hot(self, now: float, fresh_s: float) -> frozenset[str]:
        """The hot backends whose last reading is at most ``fresh_s`` seconds old at
        ``now`` (read per request: with none hot, the shared empty set)."""
        if not self._hot:
            return _NONE
        return frozenset(b for b, at in self._hot.items() if now - at <= fresh_s)


_NONE: frozenset[str] = frozenset()


class NetMedian:
    """The running median of each backend's network readings (module docstring)."""

    def __init__(self, samples: int = NET_SAMPLES):
        self._rtt: dict[str, deque[float]] = {}
        self._bps: dict[str, deque[float]] = {}
        self._samples = samples

    def smooth(self, backend_id: str, signals: EngineSignals) -> EngineSignals:
        """``signals`` with ``net_rtt_ms``/``net_bytes_per_s`` replaced by the median of
        this and the backend's previous readings (unchanged when the poll has neither)."""
        rtt, bps = signals.net_rtt_ms, signals.net_bytes_per_s
        if rtt is None and bps is None:
            return signals
        return replace(signals, net_rtt_ms=self._median(self._rtt, backend_id, rtt),
                       net_bytes_per_s=self._median(self._bps, backend_id, bps))

    def _median(self, table: dict[str, deque[float]], backend_id: str,
                value: float | None) -> float | None:
        window = table.get(backend_id)
        if window is None:
            window = table[backend_id] = deque(maxlen=self._samples)
        if value is not None:
            window.append(value)
        return statistics.median(window) if window else None
