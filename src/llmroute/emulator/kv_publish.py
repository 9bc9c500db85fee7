"""Publishing the emulated engine's KV-cache events as vLLM does (``kvevents.py``: the wire
format; vLLM's ``ZmqEventPublisher`` in ``vllm/distributed/kv_events.py``: the transport).

A ZeroMQ PUB socket bound at the engine's ``kv_events`` endpoint sends one message per
scheduler step that changed the prefix cache: ``(topic, sequence number as 8 bytes
big-endian, MessagePack batch)``. The sequence number counts from 0 for each publisher, so
a restarted engine starts again at 0 (a subscriber reads that as "forget what this engine
told you"). Sends never block the step loop: a subscriber that cannot keep up loses
messages at the socket's high-water mark (ZeroMQ drops for PUB sockets), and sees the gap
in the numbers. No replay socket.
"""

from __future__ import annotations

import time

import zmq

from llmroute.kvevents import EventBatch, KvEvent, encode

HWM = 100_000
"""Messages queued per subscriber before ZeroMQ drops (vLLM's default ``hwm``)."""


class KvEventPublisher:
    """PUB socket on ``endpoint`` (``tcp://host:port``; port ``*``: a free one, see
    ``endpoint``) publishing under ``topic``. Raises zmq.ZMQError when it cannot bind."""

    def __init__(self, endpoint: str, topic: str = "", context: zmq.Context | None = None):
        self._context = context or zmq.Context.instance()
        self._socket = self._context.socket(zmq.PUB)
        self._socket.set_hwm(HWM)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(endpoint)
        self.endpoint: str = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._topic = topic.encode()
        self._seq = 0
        self.dropped = 0

    def publish(self, events: list[KvEvent]) -> None:
        """Send ``events`` as one batch (nothing for an empty list)."""
        if not events:
            return
        payload = encode(EventBatch(time.time(), events, 0))
        try:
            self._socket.send_multipart((self._topic, self._seq.to_bytes(8, "big"), payload),
                                        flags=zmq.NOBLOCK)
        except zmq.Again:
            self.dropped += 1
        self._seq += 1

    def close(self) -> None:
        """Close the socket (pending messages are dropped)."""
        self._socket.close(linger=0)
