"""round-robin: ignore the scores; rotate the starting backend on every decision."""

from __future__ import annotations

import itertools


class Turn:
    """An injected, shared rotation counter: ``next()`` returns 0, 1, 2, …"""

    def __init__(self) -> None:
        self._count = itertools.count()

    def next(self) -> int:
        """The next turn number."""
        return next(self._count)


class RoundRobinPicker:
    """Backends in their given order, rotated to start at ``turn.next() mod n``."""

    name = "round-robin"

    def __init__(self, turn: Turn):
        self._turn = turn

    def pick(self, scored: dict[str, float]) -> list[str]:
        """Every key once; the scores are ignored."""
        ids = list(scored)
        if not ids:
            return []
        start = self._turn.next() % len(ids)
        return ids[start:] + ids[:start]
