"""A fake clock for code that takes an injected clock and sleep (seconds, monotonic)."""

from __future__ import annotations

import asyncio


class FakeClock:
    """Time that moves only when told: ``now()`` (or calling the clock) gives seconds since
    an arbitrary start; ``advance(s)`` moves it on; ``await sleep(s)`` moves it on by ``s``
    and yields to the event loop once, so other tasks run as they would while sleeping."""

    def __init__(self, start: float = 0.0):
        self._now = start

    def now(self) -> float:
        """The current fake time in seconds."""
        return self._now

    __call__ = now

    def advance(self, seconds: float) -> None:
        """Move the time on by ``seconds`` (≥ 0; raises ValueError when negative)."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        self._now += seconds

    async def sleep(self, seconds: float) -> None:
        """The injected ``sleep``: advance by ``seconds`` (a negative delay counts as 0, as
        with ``asyncio.sleep``), then let the other ready tasks run once."""
        self.advance(max(seconds, 0.0))
        await asyncio.sleep(0)
