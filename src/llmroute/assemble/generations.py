"""The parts of a served Runtime that belong to its backend set: its signal collector
(polling each backend's ``/metrics``), its strategy watcher, its subscriptions to the
engines' KV-cache events (the backends with a ``kv_events`` endpoint) and the learning of
its chat templates' tokens (``policy/template.py``).

``llmroute serve`` opens them for the first Runtime; a reload (``assemble/reload.py``)
opens them for the new Runtime and retires the old one's once its requests have drained.
With ``state: {kind: redis}`` a backend set also shares its router-side load with the other
replicas (``state/load.py``; a draining set stops adding theirs, so its drain waits only on
its own requests), its engine polls (``state/polls.py``) and its prefix index
(``state/prefix.py``).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import aiohttp

from llmroute.anchor.store import SignalStore
from llmroute.anchor.collector import Collector
from llmroute.assemble.anchor import make_collector
from llmroute.assemble.watch import watch_strategies
from llmroute.runtime import Runtime

if TYPE_CHECKING:  # redis-py is imported only with a shared state (``_share``)
    from llmroute.state.load import FleetLoad


class Generations:
    """The open parts of every Runtime still serving (the current one, and old ones
    draining after a reload)."""

    def __init__(self) -> None:
        self._open: list[tuple[Runtime, contextlib.AsyncExitStack]] = []
        self.loads: list[FleetLoad] = []  # the newest last

    async def open(self, rt: Runtime) -> None:
        """Start ``rt``'s collector (own session: it decompresses) and strategy watcher."""
        stack = contextlib.AsyncExitStack()
        try:
            session = await stack.enter_async_context(aiohttp.ClientSession())
            collector = make_collector(rt.config, rt.backends,
                                       rt.signals or SignalStore(1.0), session, rt.clock)
            await self._share(stack, rt, collector)
            await self._subscribe(stack, rt)
            collector.start()
            stack.push_async_callback(collector.stop)
            await stack.enter_async_context(watch_strategies(rt.config, rt.strategy))
            if rt.tokens is not None:  # what each backend's chat template adds, once
                await stack.enter_async_context(rt.tokens.templates.keep_learning())
        except BaseException:
            await stack.aclose()
            raise
        self._open.append((rt, stack))

    async def _share(self, stack: contextlib.AsyncExitStack, rt: Runtime,
                     collector: Collector) -> None:
        """With Redis state: share ``rt``'s load and ``collector``'s polls until ``stack``
        closes; the older backend sets stop adding the fleet's load."""
        state = rt.config.state
        if state.kind != "redis" or state.url is None:
            return
        import redis.asyncio as aioredis

        from llmroute.state.load import FleetLoad
        from llmroute.state.polls import SharedPolls
        from llmroute.state.prefix import FleetPrefix

        bound = rt.config.limits.state_timeout_s
        redis = aioredis.Redis.from_url(state.url, socket_connect_timeout=bound,
                                        socket_timeout=bound)
        stack.push_async_callback(redis.aclose)
        if state.share_polls:
            collector.share = SharedPolls(redis, collector.period_s, prefix=state.prefix,
                                          timeout_s=bound)
        if state.share_load:
            for older in self.loads:
                older.follow(False)
            load = FleetLoad(rt.stats, redis, rt.clock, prefix=state.prefix,
                             interval_s=state.load_interval_s, timeout_s=bound)
            await stack.enter_async_context(load.run())
            self.loads.append(load)
            stack.callback(self.loads.remove, load)
        if state.share_prefix:
            affinity = rt.dispatch.affinity
            affinity.share()
            await stack.enter_async_context(FleetPrefix(
                affinity.take_records, affinity.learn, rt.backends, redis,
                prefix=state.prefix, interval_s=state.prefix_interval_s,
                timeout_s=bound).run())

    @staticmethod
    async def _subscribe(stack: contextlib.AsyncExitStack, rt: Runtime) -> None:
        """Read the KV-cache events of ``rt``'s backends that publish them into the
        precise prefix index until ``stack`` closes (``anchor/sources/kv_events.py``)."""
        events = rt.dispatch.affinity.events
        endpoints = {b.id: b.kv_events for b in rt.config.backends if b.kv_events}
        if events is None or not endpoints:
            return
        from llmroute.anchor.sources.kv_events import KvEventSubscriber  # pyzmq: only then

        events.track(endpoints)
        await stack.enter_async_context(KvEventSubscriber(endpoints, events).run())

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
