"""Auto-pipelining for the Redis state store: the script calls a replica's requests make
while one round trip to Redis is under way go together, in one pipeline, when it returns.

``Batcher.run(script, keys, args)`` queues one EVALSHA and returns a future of its reply.
When no round trip is under way one starts at the next turn of the event loop (calls made
in the same turn share it); otherwise the queued calls wait for it to end and all go in
the next one (at most ``max_batch`` a round trip). Each call is still its own EVALSHA,
which Redis runs atomically and in queue order: batching changes how many round trips
the calls cost and how much client CPU (one connection checkout, one socket write and
one read loop per batch instead of per call), never what they do. An idle replica's call
waits for nothing; a busy one's waits at most for the round trip before it.

A batch is written to the batcher's own connection (taken from the pool at the first
batch and kept: one batch is in flight at a time) in one send (packed by hiredis's C
``pack_command`` when the ``hiredis`` extra is installed, else by redis-py) and its
replies read back in order. A script Redis does not have (NOSCRIPT: Redis restarted or
was flushed) is loaded and the calls that needed it are sent again, in their order. A
Redis error in one call's reply goes to that call. No call waits longer than
``timeout_s`` from when it was queued: a batch must end by its oldest call's deadline
(one timer a batch, none a call), else every call of it gets TimeoutError (and the
connection, perhaps mid-reply, is dropped); a connection error goes to every call too.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError, ResponseError

try:
    from hiredis import pack_command
except ImportError:  # the hiredis extra is not installed: redis-py packs
    pack_command = None

Call = tuple[AsyncScript, list[str], list[Any], "asyncio.Future[Any]", float]
"""A queued call: script, keys, args, its future and when it was queued (loop time)."""


class Batcher:
    """Pipelines the script calls on ``redis`` (module docstring); one batch in flight at
    a time, each bounded by ``timeout_s`` seconds."""

    def __init__(self, redis: aioredis.Redis, timeout_s: float, *, max_batch: int = 256):
        self._redis, self._timeout, self._max = redis, timeout_s, max_batch
        self._queue: deque[Call] = deque()
        self._task: asyncio.Task[None] | None = None
        self._conn: Connection | None = None
        self.batches = self.calls = 0

    def run(self, script: AsyncScript, keys: list[str], args: list[Any]) -> asyncio.Future[Any]:
        """The future reply of ``EVALSHA script keys args``; raises (through the future)
        RedisError, OSError or TimeoutError when Redis could not run it."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.append((script, keys, args, future, loop.time()))
        if self._task is None:
            self._task = asyncio.create_task(self._drain())
        return future

    async def close(self) -> None:
        """Stop sending; the calls still queued or in flight fail with ConnectionError."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        _fail(list(self._queue), ConnectionError("the state store was closed"))
        self._queue.clear()
        if self._conn is not None:
            await self._redis.connection_pool.release(self._conn)
            self._conn = None

    async def _drain(self) -> None:
        batch: list[Call] = []
        try:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._max))]
                try:
                    async with asyncio.timeout_at(batch[0][4] + self._timeout):
                        await self._send(batch)
                except (RedisError, OSError, TimeoutError) as exc:
                    _fail(batch, exc)
                batch = []
        except asyncio.CancelledError:
            _fail(batch, ConnectionError("the state store was closed"))
            raise
        finally:
            self._task = None

    async def _send(self, batch: list[Call]) -> None:
        """One pipeline of ``batch``; the calls that met NOSCRIPT once more after loading
        their scripts."""
        self.batches += 1
        self.calls += len(batch)
        replies = await self._pipeline(batch)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            for script in {id(batch[i][0]): batch[i][0] for i in missing}.values():
                await self._redis.script_load(script.script)
            again = await self._pipeline([batch[i] for i in missing])
            for i, reply in zip(missing, again):
                replies[i] = reply
        for (*_, future, _), reply in zip(batch, replies):
            if future.done():  # its caller gave up waiting
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _pipeline(self, calls: list[Call]) -> list[Any]:
        """Every call's reply (a ResponseError as the reply for one Redis refused)."""
        commands = [("EVALSHA", script.sha, len(keys), *keys, *args)
                    for script, keys, args, *_ in calls]
        if self._conn is None:
            self._conn = await self._redis.connection_pool.get_connection()
        conn = self._conn  # reconnects by itself after a disconnect
        try:
            await conn.send_packed_command(_pack(conn, commands), check_health=False)
            replies: list[Any] = []
            for _ in calls:
                try:  # the batch's deadline bounds the reads: no timer per reply
                    replies.append(await conn.read_response(timeout=math.inf))
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            await conn.disconnect(nowait=True)  # it may be mid-reply: start afresh
            raise
        return replies


def _pack(conn: Connection, commands: list[tuple[Any, ...]]) -> bytes | list[bytes]:
    """The commands in Redis's protocol, for one send."""
    if pack_command is not None:
        return b"".join([pack_command(c) for c in commands])
    return conn.pack_commands(commands)


def _fail(calls: list[Call], exc: BaseException) -> None:
    for *_, future, _ in calls:
        if not future.done():
            future.set_exception(exc)
