"""The TTFT bound of a non-streamed request.

An engine sends nothing until a non-streamed answer is complete, so silence alone cannot
tell a frozen engine (SIGSTOP, a hung GPU) from a long generation. Once a non-streamed call
has waited its backend's TTFT bound (``ttft_s``), the watchdog asks every ``CHECK_EVERY_S``
whether the signal collector has lost sight of that engine (``RouterStats.dark``: its last
poll failed or timed out, or its signals went stale). If it has, the call is cancelled (the
connection closes) and fails as ``UpstreamTimeout`` (phase ``ttft``), which failover treats
like any engine fault: the next candidate is tried. An engine whose polls still answer keeps
generating, up to ``timeouts.total_s``. A backend the collector does not poll (engine kind
``openai``) is never dark, so it gets only the total bound.

Cost: one timer handle per non-streamed call (cancelled when the answer comes first); a
check only for calls past their TTFT bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from llmroute.errors import UpstreamTimeout

T = TypeVar("T")

CHECK_EVERY_S = 0.1
"""Seconds between two looks at the collector's view once the TTFT bound has passed (half
the default poll interval, so a frozen engine is noticed within one poll after it is)."""

DarkReader = Callable[[float], frozenset[str]]


async def bounded(call: Awaitable[T], backend_id: str, ttft_s: float,
                  dark: DarkReader | None, clock: Callable[[], float]) -> T:
    """``await call``; past ``ttft_s`` seconds, cancel it as soon as ``dark(clock())``
    names ``backend_id``. Raises UpstreamTimeout (phase ``ttft``) then, and whatever
    ``call`` raises otherwise. ``dark`` None: no bound beyond the call's own."""
    if dark is None:
        return await call
    dog = _Dog(backend_id, dark, clock)
    dog.arm(ttft_s)
    try:
        return await call
    except asyncio.CancelledError:
        if not dog.fired or dog.task.uncancel() > 0:
            raise
        raise UpstreamTimeout(f"the engine gave no answer within {ttft_s:g} s and stopped "
                              "answering its metrics polls", phase="ttft",
                              backend_id=backend_id) from None
    finally:
        dog.disarm()


class _Dog:
    """One call's timer: checks ``dark`` from ``arm``'s delay on, every CHECK_EVERY_S."""

    __slots__ = ("backend_id", "dark", "clock", "task", "fired", "_handle", "_loop")

    def __init__(self, backend_id: str, dark: DarkReader, clock: Callable[[], float]):
        self.backend_id, self.dark, self.clock = backend_id, dark, clock
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task(self._loop)
        assert task is not None
        self.task = task
        self.fired = False
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, delay_s: float) -> None:
        """Look after ``delay_s`` seconds."""
        self._handle = self._loop.call_later(delay_s, self._check)

    def disarm(self) -> None:
        """No more looks."""
        if self._handle is not None:
            self._handle.cancel()

    def _check(self) -> None:
        if self.backend_id in self.dark(self.clock()):
            self.fired = True
            self.task.cancel()
        else:
            self.arm(CHECK_EVERY_S)
