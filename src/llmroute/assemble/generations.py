"""The parts of a served Runtime that belong to its backend set: its signal collector
(polling each backend's ``/metrics``) and its strategy watcher.

``llmroute serve`` opens them for the first Runtime; a reload (``assemble/reload.py``)
opens them for the new Runtime and retires the old one's once its requests have drained.
"""

from __future__ import annotations

import contextlib

import aiohttp

from llmroute.anchor.store import SignalStore
from llmroute.assemble.anchor import make_collector
from llmroute.assemble.strategies import watch_strategies
from llmroute.runtime import Runtime


class Generations:
    """The open parts of every Runtime still serving (the current one, and old ones
    draining after a reload)."""

    def __init__(self) -> None:
        self._open: list[tuple[Runtime, contextlib.AsyncExitStack]] = []

    async def open(self, rt: Runtime) -> None:
        """Start ``rt``'s collector (own session: it decompresses) and strategy watcher."""
        stack = contextlib.AsyncExitStack()
        try:
            session = await stack.enter_async_context(aiohttp.ClientSession())
            collector = make_collector(rt.config, rt.backends,
                                       rt.signals or SignalStore(1.0), session, rt.clock)
            collector.start()
            stack.push_async_callback(collector.stop)
            await stack.enter_async_context(watch_strategies(rt.config, rt.strategy))
        except BaseException:
            await stack.aclose()
            raise
        self._open.append((rt, stack))

    async def retire(self, rt: Runtime) -> None:
        """Stop ``rt``'s collector and watcher (nothing when they are not open)."""
        for i, (opened, stack) in enumerate(self._open):
            if opened is rt:
                del self._open[i]
                await stack.aclose()
                return

    async def close(self) -> None:
        """Stop every open generation, newest first."""
        while self._open:
            await self.retire(self._open[-1][0])
