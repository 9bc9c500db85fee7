"""How many more requests the fleet can take now, from the anchor's view (router stats and
polled engine signals), against the priority step's watermarks."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from llmroute.config.policy import WatermarksConfig
from llmroute.types import EngineSignals, MetricsSnapshot


def engine_saturated(signals: EngineSignals | None, marks: WatermarksConfig) -> bool:
    """Whether an engine's own signals put it over the ``queue`` or ``kv`` watermark (False
    without signals or without those watermarks)."""
    if signals is None:
        return False
    if marks.queue is not None and signals.waiting is not None and signals.waiting >= marks.queue:
        return True
    kv = signals.kv_cache_usage
    return marks.kv is not None and kv is not None and kv >= marks.kv


def headroom(snapshot: MetricsSnapshot, backend_ids: Iterable[str],
             marks: WatermarksConfig) -> int:
    """Requests the backends ``backend_ids`` can still take: per backend the in-flight
    watermark minus its in-flight requests (0 when its engine is saturated), summed. 0
    means every backend is saturated."""
    room = 0
    for b in backend_ids:
        stats = snapshot.stats.get(b)
        if engine_saturated(snapshot.engines.get(b), marks):
            continue
        room += max(0, marks.in_flight - (stats.in_flight if stats is not None else 0))
    return room


def fleet_headroom(snap: Callable[[float], MetricsSnapshot], clock: Callable[[], float],
                   backend_ids: Iterable[str], marks: WatermarksConfig) -> Callable[[], int]:
    """``headroom`` of ``backend_ids`` over a fresh snapshot (``snap(clock())``) per call."""
    ids = tuple(backend_ids)
    return lambda: headroom(snap(clock()), ids, marks)
