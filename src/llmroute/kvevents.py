"""vLLM's KV-cache events on the wire: what the emulator publishes and the anchor reads.

vLLM (``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq"}'``)
publishes every change of its prefix cache on a ZeroMQ PUB socket
(``vllm/distributed/kv_events.py``: ``ZmqEventPublisher``). Each message has three frames:
the topic (bytes; vLLM's default is empty, llm-d's pods use ``kv@<pod>@<model>``), a
sequence number (8 bytes, big-endian, counting up from 0 per publisher) and the payload, a
MessagePack ``KVEventBatch`` encoded by msgspec with ``array_like=True`` and tagged events,
the layout vLLM's own subscriber example (``examples/online_serving/
kv_events_subscriber.py``) and llm-d's indexer (``llm-d-kv-cache-manager:
pkg/kvcache/kvevents/events.go``) decode::

    batch  = [ts (float, s), [event, …], data_parallel_rank?]
    event  = ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
              lora_id, medium]
           | ["BlockRemoved", block_hashes, medium]
           | ["AllBlocksCleared"]

Block hashes are unsigned 64-bit ints (``ExternalBlockHash``); ``medium`` is ``"GPU"`` for
the GPU cache. Newer vLLM releases add trailing fields (``lora_name``, ``extra_keys``,
``group_idx``); a decoder reading the array layout must skip what it does not know, and
``decode`` below reads the fields it needs by position (extra ones are ignored). The
replay socket (a ROUTER that resends buffered batches from a sequence number) is not
implemented: a consumer that sees a gap in the sequence numbers must forget what it
learned from that publisher (``anchor/prefix/events.py`` does).
"""

from __future__ import annotations

import msgspec

MEDIUM_GPU = "GPU"


class _Event(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """Base of the tagged events (the tag is the class name, as in vLLM)."""


class BlockStored(_Event):
    """Blocks ``block_hashes`` (in prefix order) were cached; ``parent_block_hash`` is the
    block before the first (None at a prompt's start)."""

    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None


class BlockRemoved(_Event):
    """Blocks ``block_hashes`` were evicted."""

    block_hashes: list[int]
    medium: str | None = None


class AllBlocksCleared(_Event):
    """The whole cache was emptied (``reset_prefix_cache``, or a restart)."""


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """One published message: ``ts`` (seconds since the epoch) and its ``events``."""

    ts: float
    events: list[KvEvent]
    data_parallel_rank: int | None = None


_ENCODER = msgspec.msgpack.Encoder()


def encode(batch: EventBatch) -> bytes:
    """The MessagePack payload of ``batch``."""
    return _ENCODER.encode(batch)


def decode(payload: bytes) -> EventBatch:
    """The batch in ``payload``; events of an unknown kind, or with fields that do not
    parse, are dropped. Raises ValueError when the payload is not a batch at all."""
    try:
        raw = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not MessagePack: {exc}") from exc
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list) \
            or not isinstance(raw[0], (int, float)):
        raise ValueError("not a KV event batch: expected [ts, [events…], …]")
    events = [e for e in (_event(item) for item in raw[1]) if e is not None]
    return EventBatch(float(raw[0]), events)


_KINDS: dict[str, tuple[type[KvEvent], int, int]] = {
    "BlockStored": (BlockStored, 4, 6), "BlockRemoved": (BlockRemoved, 1, 2),
    "AllBlocksCleared": (AllBlocksCleared, 0, 0)}
"""Tag → (kind, fields it needs, fields read): the fields after those read are ignored."""


def _event(item: object) -> KvEvent | None:
    """One event read by position (fields past the known ones ignored); None when it is
    not one of the three kinds or its fields do not convert."""
    if not isinstance(item, list) or not item or not isinstance(item[0], str):
        return None
    known = _KINDS.get(item[0])
    if known is None or len(item) < known[1] + 1:
        return None
    kind, _, read = known
    try:
        return msgspec.convert(item[:read + 1], kind)
    except msgspec.ValidationError:
        return None
