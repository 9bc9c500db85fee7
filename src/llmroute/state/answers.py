"""The answer cache shared by a fleet of replicas through Redis, off the request path
(``cache/answers.py``: each replica keeps its own entries and vector index in process).

Every ``interval_s`` seconds (default 0.1) a ``FleetAnswers`` makes one round trip to Redis
(a pipeline): ``XADD <prefix>answers MAXLEN ~ <keep>`` of each event this replica queued
since the last exchange (fields ``r`` = its random id, ``k`` = ``put`` or ``purge``, ``d`` =
the encoded entry or purge) and ``XREAD`` of what the stream holds past the last entry read
(at most ``batch``; a new replica starts from the stream's oldest entry, so it learns the
fleet's entries and the purges that followed them, in order). The other replicas' events
are applied to this replica's cache; one that does not decode is dropped and counted there.

No request waits on Redis: a lookup reads only this replica's entries, so a slow or lost
Redis can never delay an answer; it only delays sharing. Redis out of reach (or slower than
``timeout_s``): the replica serves from its own entries, logged once per change of state
and counted in ``outages``; the queued events are kept (the newest ``OUTBOX``) and sent
when Redis answers again.
"""

from __future__ import annotations

from collections.abc import Callable

import redis.asyncio as aioredis

from llmroute.state.stream import StreamExchange

Event = tuple[str, bytes]
"""``(kind, data)``: ``("put", encoded entry)`` or ``("purge", JSON)``."""


class FleetAnswers(StreamExchange[Event]):
    """Sends ``take_events()`` and hands the others' to ``apply(kind, data)`` (module
    docstring; the exchange itself is ``state/stream.py``'s). Nothing runs until ``run``."""

    def __init__(self, take_events: Callable[[], list[Event]],
                 apply: Callable[[str, bytes], None], redis: aioredis.Redis, *,
                 prefix: str = "llmroute:", interval_s: float = 0.1, keep: int = 10_000,
                 batch: int = 1_000, timeout_s: float = 0.25):
        super().__init__(take_events, redis, prefix + "answers", interval_s=interval_s,
                         keep=keep, batch=batch, outbox=OUTBOX, timeout_s=timeout_s,
                         log="llmroute.cache", event="cache_fleet",
                         degraded={"serving": "this replica's own entries"})
        self._apply = apply

    def _fields(self, item: Event) -> dict[str, bytes | str]:
        kind, data = item
        return {"k": kind, "d": data}

    def _entry(self, fields: dict[bytes, bytes]) -> None:
        self._apply(fields.get(b"k", b"").decode(errors="replace"), fields.get(b"d", b""))
        self.applied += 1


OUTBOX = 4096
"""Events kept while Redis is out of reach (the newest)."""
