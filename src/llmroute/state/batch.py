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

A script Redis does not have (NOSCRIPT: Redis restarted or was flushed) is loaded and the
calls that needed it are sent again, in their order. A Redis error in one call's reply
goes to that call; a connection error or a batch slower than ``timeout_s`` goes to every
call of the batch (callers bound their own wait as well: ``state/redis.py``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

Call = tuple[AsyncScript, list[str], list[Any], "asyncio.Future[Any]"]


class Batcher:
    """Pipelines the script calls on ``redis`` (module docstring); one batch in flight at
    a time, each bounded by ``timeout_s`` seconds."""

    def __init__(self, redis: aioredis.Redis, timeout_s: float, *, max_batch: int = 256):
        self._redis, self._timeout, self._max = redis, timeout_s, max_batch
        self._queue: deque[Call] = deque()
        self._task: asyncio.Task[None] | None = None
        self.batches = self.calls = 0

    def run(self, script: AsyncScript, keys: list[str], args: list[Any]) -> asyncio.Future[Any]:
        """The future reply of ``EVALSHA script keys args``; raises (through the future)
        RedisError, OSError or TimeoutError when Redis could not run it."""
        future = asyncio.get_running_loop().create_future()
        self._queue.append((script, keys, args, future))
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

    async def _drain(self) -> None:
        batch: list[Call] = []
        try:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._max))]
                try:
                    async with asyncio.timeout(self._timeout):
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
        for (_, _, _, future), reply in zip(batch, replies):
            if future.done():  # its caller gave up waiting
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _pipeline(self, calls: list[Call]) -> list[Any]:
        pipe = self._redis.pipeline(transaction=False)
        for script, keys, args, _ in calls:
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return await pipe.execute(raise_on_error=False)


def _fail(calls: list[Call], exc: BaseException) -> None:
    for *_, future in calls:
        if not future.done():
            future.set_exception(exc)
