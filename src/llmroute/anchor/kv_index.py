"""The precise prefix index: which KV blocks each engine holds, as its own KV-cache events
say (``kvevents.py``: vLLM's ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``), the
way llm-d's "precise" prefix scheduling indexes them (``llm-d-kv-cache-manager:
pkg/kvcache/kvevents/pool.go``, ``kvblock/index.go``).

Per backend: the engine's block hashes, its block size (from ``BlockStored``) and the
sequence number of the last message applied. A message is applied only when it is the
next one: a number at or below the last one is a duplicate (dropped), except a 0 whose
batch is stamped later than the last one applied — a restarted engine (a publisher counts
from 0), whose cache is empty: its blocks are forgotten; a jump forward means messages were lost, and since a lost ``BlockRemoved``
would leave blocks claimed that are gone, the backend's blocks are forgotten before the
message is applied.
Events for a backend the index was not built for are dropped (``unknown`` counts them).
A restart the stream does not show (the engine came back before sending anything) shows
in its metrics: ``Affinity`` forgets the backend when its prefix-cache counters go
backwards (``anchor/prefix.py``), so a claim outlives the cache by one poll at most.

Memory is bounded: at most ``capacity`` blocks per backend (default 262,144: 4M tokens at
16 a block), the oldest stored dropped first beyond it — an engine never holds more
blocks than its cache, so only a misbehaving stream reaches it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from llmroute.kvevents import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch

CAPACITY = 262_144
"""Blocks kept per backend at most."""


@dataclass
class _Engine:
    """What one engine's events said: its ``blocks`` (oldest stored first), block size,
    the last sequence number applied (None before the first) and its batch's ``ts``."""

    blocks: OrderedDict[int, None] = field(default_factory=OrderedDict)
    block_size: int | None = None
    seq: int | None = None
    ts: float = 0.0


class KvEventIndex:
    """Engine blocks per backend from KV-cache events (module docstring), for the backends
    ``backend_ids``; at most ``capacity`` (≥ 1) blocks each."""

    def __init__(self, backend_ids: Iterable[str], capacity: int = CAPACITY):
        self.capacity = max(capacity, 1)
        self._engines = {b: _Engine() for b in backend_ids}
        self.unknown = self.duplicates = self.gaps = self.restarts = 0

    def apply(self, backend_id: str, seq: int, batch: EventBatch) -> bool:
        """Apply message ``seq`` of ``backend_id``; False when it was dropped (unknown
        backend, or a duplicate)."""
        engine = self._engines.get(backend_id)
        if engine is None:
            self.unknown += 1
            return False
        last = engine.seq
        if last is not None and seq != last + 1:
            restart = seq == 0 and batch.ts > engine.ts
            if seq <= last and not restart:  # repeated or late: applied already
                self.duplicates += 1
                return False
            self.gaps += seq > last
            self.restarts += restart
            engine.blocks.clear()
        engine.seq, engine.ts = seq, batch.ts
        for event in batch.events:
            self._event(engine, event)
        return True

    def track(self, backend_ids: Iterable[str]) -> None:
        """Index exactly ``backend_ids`` from now on (a reload changed the backend set):
        new ones start empty, the others' blocks are dropped."""
        ids = set(backend_ids)
        self._engines = {b: self._engines.get(b) or _Engine() for b in ids}

    def forget(self, backend_id: str) -> None:
        """Drop what ``backend_id``'s events said (its engine restarted or went away); the
        next message is taken as the first."""
        engine = self._engines.get(backend_id)
        if engine is not None:
            self._engines[backend_id] = _Engine()

    def block_size(self, backend_id: str) -> int | None:
        """The engine's block size in tokens, once a ``BlockStored`` said it."""
        engine = self._engines.get(backend_id)
        return engine.block_size if engine is not None else None

    def matched(self, backend_id: str, hashes: Sequence[int]) -> int:
        """Leading ``hashes`` the engine holds (0 for an unknown backend)."""
        engine = self._engines.get(backend_id)
        if engine is None:
            return 0
        blocks = engine.blocks
        n = 0
        for h in hashes:
            if h not in blocks:
                break
            n += 1
        return n

    def size(self, backend_id: str) -> int:
        """Blocks held for ``backend_id``."""
        engine = self._engines.get(backend_id)
        return len(engine.blocks) if engine is not None else 0

    def live(self, backend_id: str) -> bool:
        """True once a message of ``backend_id`` was applied (since the last ``forget``)."""
        engine = self._engines.get(backend_id)
        return engine is not None and engine.seq is not None

    def _event(self, engine: _Engine, event: object) -> None:
        blocks = engine.blocks
        if isinstance(event, BlockStored):
            engine.block_size = event.block_size
            for h in event.block_hashes:
                blocks[h] = None
                blocks.move_to_end(h)
            while len(blocks) > self.capacity:
                blocks.popitem(last=False)
        elif isinstance(event, BlockRemoved):
            for h in event.block_hashes:
                blocks.pop(h, None)
        elif isinstance(event, AllBlocksCleared):
            blocks.clear()
