"""The answer cache's entries on one replica: exact lookups, nearest-vector lookups, LRU
eviction under an entry and a byte bound, TTLs, purges.

``Entries`` holds every live entry in least-recently-used order (``OrderedDict``); an
exact key maps to its entry; a context key (``cache/keys.py``) to a ``Space``, the vectors of
the entries that share it as one ``(n, d)`` float32 matrix, rebuilt lazily after a change.
``nearest`` is one matrix-vector product over that space (plain numpy: the spaces are per
tenant, strategy, model and system prompt, so small; ``bench/cache.py`` prices a space of
1,000 and 10,000 entries) and returns the ``k`` most similar entries above a similarity.
An entry past its ``expires`` is dropped when met; ``put`` evicts least recently used
entries until both bounds hold. Synchronous, no I/O: the event loop calls it (microseconds
per call; the replicas' exchange is ``state/answers.py``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator

import numpy as np

from llmroute.cache.entry import Entry


class Space:
    """The entries of one context key with a vector: ids and their matrix."""

    __slots__ = ("ids", "vectors", "_matrix")

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.vectors: list[np.ndarray] = []
        self._matrix: np.ndarray | None = None

    def add(self, entry_id: str, vector: np.ndarray) -> None:
        """Add one row."""
        self.ids.append(entry_id)
        self.vectors.append(vector)
        self._matrix = None

    def drop(self, entry_id: str) -> None:
        """Remove the row of ``entry_id`` (if present)."""
        if entry_id in self.ids:
            i = self.ids.index(entry_id)
            del self.ids[i], self.vectors[i]
            self._matrix = None

    def top(self, vector: np.ndarray, k: int, floor: float) -> list[tuple[str, float]]:
        """Up to ``k`` ``(id, cosine)`` at or above ``floor``, most similar first."""
        if self._matrix is None:
            self._matrix = np.vstack(self.vectors)
        if self._matrix.shape[1] != vector.shape[0]:
            return []
        sims = self._matrix @ vector
        order = np.argsort(-sims)[:k] if len(sims) > k else np.argsort(-sims)
        return [(self.ids[i], float(sims[i])) for i in order if sims[i] >= floor]


class Entries:
    """Live entries (module docstring): at most ``max_entries`` and ``max_bytes`` (their
    encoded sizes); ``clock`` gives epoch seconds."""

    def __init__(self, max_entries: int, max_bytes: int, clock: Callable[[], float]):
        self._max, self._max_bytes, self._clock = max_entries, max_bytes, clock
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._exact: dict[str, str] = {}
        self._spaces: dict[str, Space] = {}
        self.bytes = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def exact(self, key: str) -> Entry | None:
        """The live entry of exact key ``key`` (marked used), or None."""
        entry_id = self._exact.get(key)
        return None if entry_id is None else self._live(entry_id)

    def nearest(self, context: str, vector: np.ndarray, k: int, floor: float
                ) -> list[tuple[Entry, float]]:
        """Up to ``k`` live entries of ``context`` whose vectors are at least ``floor``
        similar (cosine) to ``vector``, most similar first (not marked used: the caller
        marks the one it serves, ``touch``)."""
        space = self._spaces.get(context)
        if space is None:
            return []
        found = []
        for entry_id, sim in space.top(vector, k, floor):
            entry = self._live(entry_id, touch=False)
            if entry is not None:
                found.append((entry, sim))
        return found

    def touch(self, entry: Entry) -> None:
        """Mark ``entry`` used (LRU)."""
        if entry.id in self._entries:
            self._entries.move_to_end(entry.id)

    def put(self, entry: Entry) -> int:
        """Keep ``entry`` (replacing one with the same exact key), then evict least
        recently used entries past the bounds; the number evicted."""
        old = self._exact.get(entry.exact)
        if old is not None:
            self.drop(old)
        if entry.id in self._entries:
            self.drop(entry.id)
        self._entries[entry.id] = entry
        self._exact[entry.exact] = entry.id
        self.bytes += entry.size
        if entry.vector is not None:
            self._spaces.setdefault(entry.context, Space()).add(entry.id, entry.vector)
        evicted = 0
        while self._entries and (len(self._entries) > self._max or self.bytes > self._max_bytes):
            self.drop(next(iter(self._entries)))
            evicted += 1
        self.evicted += evicted
        return evicted

    def drop(self, entry_id: str) -> Entry | None:
        """Remove one entry; the entry removed, or None."""
        entry = self._entries.pop(entry_id, None)
        if entry is None:
            return None
        self.bytes -= entry.size
        if self._exact.get(entry.exact) == entry_id:
            del self._exact[entry.exact]
        space = self._spaces.get(entry.context)
        if space is not None:
            space.drop(entry_id)
            if not space.ids:
                del self._spaces[entry.context]
        return entry

    def purge(self, tenant: str | None = None, key_id: str | None = None) -> int:
        """Remove the entries of ``tenant`` (None: every tenant) and, within it, of
        ``key_id`` (None: every key); the number removed."""
        doomed = [e.id for e in self._entries.values()
                  if (tenant is None or e.tenant == tenant)
                  and (key_id is None or e.key_id == key_id)]
        for entry_id in doomed:
            self.drop(entry_id)
        return len(doomed)

    def _live(self, entry_id: str, *, touch: bool = True) -> Entry | None:
        entry = self._entries.get(entry_id)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            self.drop(entry_id)
            return None
        if touch:
            self._entries.move_to_end(entry_id)
        return entry
