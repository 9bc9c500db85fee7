"""Subscribing to the engines' KV-cache events (``kvevents.py``: vLLM's ZeroMQ wire format)
and feeding them to the precise prefix index (``anchor/kv_index.py``), at the I/O edge.

One ZeroMQ SUB socket per backend with a ``kv_events`` endpoint connects to the engine's
PUB socket (subscribed to every topic), and one task per socket reads its messages: three
frames (topic, 8-byte big-endian sequence number, MessagePack batch). A message that does
not have that shape or does not decode is counted in ``bad`` and dropped; the index judges
sequence numbers (duplicates, gaps, restarts). ZeroMQ reconnects by itself, so an engine
that goes away and comes back is read again without the router doing anything; its
restarted sequence (from 0) tells the index to forget the old blocks. Nothing here runs on
the request path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping

import structlog
import zmq
import zmq.asyncio

from llmroute.anchor.kv_index import KvEventIndex
from llmroute.kvevents import decode

log = structlog.get_logger("llmroute.anchor.kv_events")


class KvEventSubscriber:
    """Reads ``endpoints`` (``{backend_id: zmq endpoint}``) into ``index`` while ``run``'s
    block runs."""

    def __init__(self, endpoints: Mapping[str, str], index: KvEventIndex,
                 context: zmq.asyncio.Context | None = None):
        self._endpoints = dict(endpoints)
        self._index = index
        self._context = context or zmq.asyncio.Context.instance()
        self.received = self.bad = 0

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[KvEventSubscriber]:
        """Subscribe to every endpoint until the block ends (then close the sockets)."""
        sockets = {b: self._socket(url) for b, url in self._endpoints.items()}
        tasks = [asyncio.create_task(self._follow(b, s)) for b, s in sockets.items()]
        try:
            yield self
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for s in sockets.values():
                s.close(linger=0)

    def _socket(self, endpoint: str) -> zmq.asyncio.Socket:
        socket = self._context.socket(zmq.SUB)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.setsockopt(zmq.RCVHWM, 100_000)
        socket.connect(endpoint)
        return socket

    async def _follow(self, backend_id: str, socket: zmq.asyncio.Socket) -> None:
        while True:
            frames = await socket.recv_multipart()
            self.handle(backend_id, frames)

    def handle(self, backend_id: str, frames: list[bytes]) -> bool:
        """Apply one received message of ``backend_id``; False when it was malformed (or
        the index dropped it)."""
        self.received += 1
        if len(frames) != 3 or len(frames[1]) != 8:
            return self._bad(backend_id, "expected 3 frames: topic, 8-byte seq, payload")
        try:
            batch = decode(frames[2])
        except ValueError as exc:
            return self._bad(backend_id, str(exc))
        return self._index.apply(backend_id, int.from_bytes(frames[1], "big"), batch)

    def _bad(self, backend_id: str, why: str) -> bool:
        self.bad += 1
        if self.bad == 1 or self.bad % 1000 == 0:
            log.warning("kv_event_malformed", backend=backend_id, error=why[:120],
                        malformed=self.bad)
        return False
