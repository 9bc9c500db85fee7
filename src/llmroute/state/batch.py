"""Auto-pipelining for the Redis state store: the calls a replica's requests make while
one round trip to Redis is under way go together, in one write, when it returns.

``Batcher.run(script, keys, args)`` queues one EVALSHA and returns a future of its reply;
``Batcher.post`` queues one whose reply nobody waits for (a settlement: its failure is
only counted in ``lost``); ``Batcher.command`` queues a plain command (PING, ZREM). When
no round trip is under way the call goes out at once; otherwise the queued calls wait for
it to end and all go in the next one (at most ``max_batch`` a round trip), sent once the
callers its replies woke have run (they add their next calls to it). Each call is still
its own command, which Redis runs (a script atomically) in queue order: batching changes
how many round trips the calls cost and how much client CPU, never what they do. An idle
replica's call waits for nothing; a busy one's waits at most for the round trip before it.

The batcher owns one connection. redis-py makes it (TCP, unix socket or TLS, AUTH,
SELECT: whatever the URL says), the ``scripts`` are loaded on it, and its transport goes
to the batcher's protocol: a call is packed once, when queued, by hiredis's C
``pack_command``; a batch is one ``transport.write``; the replies are parsed by one
hiredis ``Reader`` as the bytes arrive and each goes to its call's future from the
protocol's callback, with no task, stream or timer per call or per batch. A script Redis
does not have (NOSCRIPT: one not in ``scripts``, or Redis dropped its scripts while the
connection stayed up — then the calls after it in its batch have already run) is loaded
(``SCRIPT LOAD`` ahead of them in the next write) and the calls that needed it are sent
again, in their order, before any call queued after their batch. A Redis error in one
call's reply goes to that call. A call waits on Redis at most ``timeout_s`` from when it
was queued: a batch must end by its oldest call's deadline, else every call of it gets
TimeoutError and the connection (perhaps mid-reply) is dropped. An event loop busy past a
deadline does not blame Redis: the replies that arrived meanwhile are read first, and a
batch the loop could write only late gets half a bound from its write (Redis still
answers each write within ``timeout_s / 2``, or fails it). One timer checks that,
re-armed at most once a deadline, not once a batch. A lost connection
fails the calls in flight; the queued ones go out on a new connection (made within the
oldest one's bound, else they fail).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError, InvalidResponse, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

Call = tuple[AsyncScript | None, bytes, "asyncio.Future[Any] | None", float]
"""A queued call: its script (None: a plain command, e.g. the ``SCRIPT LOAD`` sent again
before a NOSCRIPT call), the packed command, its future (None: nobody waits for the reply)
and when it was queued (loop time)."""


class Batcher:
    """Pipelines the calls to ``redis``'s server (module docstring); one batch in flight at
    a time, each call bounded by ``timeout_s`` seconds."""

    def __init__(self, redis: aioredis.Redis, timeout_s: float, *, max_batch: int = 256,
                 scripts: tuple[AsyncScript, ...] = ()):
        self._redis, self._timeout, self._max = redis, timeout_s, max_batch
        self._scripts = scripts  # loaded on every new connection
        self._queue: deque[Call] = deque()
        self._sent: deque[Call] = deque()  # the batch in flight, in order
        self._link: _Link | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._late: Call | None = None  # the oldest call in flight, once seen overdue
        self._written = 0.0  # when the batch in flight was written (loop time)
        self._retry: list[Call] = []  # the batch's calls that met NOSCRIPT so far
        self._soon = False  # a flush is scheduled for the end of this turn of the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.batches = self.calls = self.lost = 0

    def run(self, script: AsyncScript, keys: list[str], args: list[Any]) -> asyncio.Future[Any]:
        """The future reply of ``EVALSHA script keys args``; raises (through the future)
        RedisError, OSError or TimeoutError when Redis could not run it."""
        future = (self._loop or self._bind()).create_future()
        self._add(script, ("EVALSHA", script.sha, len(keys), *keys, *args), future)
        return future

    def post(self, script: AsyncScript, keys: list[str], args: list[Any]) -> None:
        """Queue ``EVALSHA script keys args`` without waiting for its reply (sent as
        ``run``'s calls are); a failure is counted in ``lost``."""
        self._add(script, ("EVALSHA", script.sha, len(keys), *keys, *args), None)

    def command(self, *args: Any) -> asyncio.Future[Any]:
        """The future reply of the Redis command ``args`` (``"PING"``, ``"ZREM", key,
        member``), sent in the batches as the scripts are."""
        future = (self._loop or self._bind()).create_future()
        self._add(None, args, future)
        return future

    def _add(self, script: AsyncScript | None, command: tuple[Any, ...],
             future: asyncio.Future[Any] | None) -> None:
        """Queue one call, packed now; it goes out at once when nothing is in flight."""
        if self._closed:
            self._fail([(script, b"", future, 0.0)], ConnectionError("the state store was closed"))
            return
        when = (self._loop or self._bind()).time()
        self._queue.append((script, hiredis.pack_command(command), future, when))
        self.calls += script is not None
        if not self._sent and not self._soon:
            self._flush()

    async def close(self) -> None:
        """Stop sending; the calls still queued or in flight fail with ConnectionError."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._drop(ConnectionError("the state store was closed"))
        self._fail(self._queue, ConnectionError("the state store was closed"))

    def _bind(self) -> asyncio.AbstractEventLoop:
        self._loop = asyncio.get_running_loop()
        return self._loop

    def _flush(self) -> None:
        """Send the next batch (nothing while one is in flight or none is queued);
        connect first when there is no connection."""
        if self._sent or not self._queue or self._closed:
            return
        link = self._link
        if link is None:
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
            return
        queue, sent = self._queue, self._sent
        n = min(len(queue), self._max)
        if n == len(queue):
            sent.extend(queue)
            queue.clear()
        else:
            sent.extend(queue.popleft() for _ in range(n))
        self.batches += 1
        link.write(b"".join([c[1] for c in sent]))
        self._written = self._loop.time()
        due = self._due()
        if self._timer is None or self._timer.when() > due:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_at(due, self._check)

    async def _connect(self) -> None:
        """One connection, made by redis-py (and ``scripts`` loaded on it) within the
        oldest queued call's bound (half a bound when the loop starts it later); on
        failure every queued call fails."""
        pool = self._redis.connection_pool
        conn = pool.connection_class(**pool.connection_kwargs)
        now = (self._loop or self._bind()).time()
        due = max(self._queue[0][3] if self._queue else now, now - self._timeout / 2)
        try:
            async with asyncio.timeout_at(due + self._timeout):
                await conn.connect()
                for script in self._scripts:
                    await conn.send_command("SCRIPT", "LOAD", script.script)
                    await conn.read_response()
            self._link = _Link(self, conn)
        except (RedisError, OSError, TimeoutError) as exc:
            await conn.disconnect(nowait=True)
            self._fail(self._queue, exc)
        except asyncio.CancelledError:
            await conn.disconnect(nowait=True)
            raise
        finally:
            self._connecting = None
        self._flush()

    def _check(self) -> None:
        """The timer: fail the batch in flight once it is due (``_due``) and the replies
        already received had one more turn of the loop to be read, else wait."""
        self._timer = None
        if not self._sent:
            return
        oldest = self._sent[0]
        due = self._due()
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._check)
        elif self._late is not oldest:  # once more after the loop's next read of sockets
            self._late = oldest
            self._timer = self._loop.call_later(0.001, self._check)
        else:
            self._drop(RedisTimeoutError(f"no reply within {self._timeout * 1000:g} ms"))
            self._flush()

    def _due(self) -> float:
        """When the batch in flight must be answered (loop time): by its oldest call's
        bound, or half a bound after it was written when the loop wrote it that late."""
        return max(self._sent[0][3] + self._timeout, self._written + self._timeout / 2)

    def _drop(self, exc: BaseException) -> None:
        """Close the connection and fail the calls in flight with ``exc``."""
        link, self._link = self._link, None
        if link is not None:
            link.close()
        sent, self._sent, self._retry = [*self._retry, *self._sent], deque(), []
        self._fail(sent, exc)

    def _fail(self, calls: Any, exc: BaseException) -> None:
        for script, _, future, _ in calls:
            if future is None:
                self.lost += script is not None
            elif not future.done():
                future.set_exception(exc)
        if calls is self._queue:
            self._queue.clear()

    def replied(self, link: _Link, replies: list[Any]) -> None:
        """The protocol's callback: ``replies`` (read on ``link``) answer the oldest calls
        in flight, in order. Once the batch is answered the next one goes out."""
        sent = self._sent
        retry = self._retry
        if link is not self._link:  # a connection already dropped
            return
        if len(replies) > len(sent):
            self.garbled(link, InvalidResponse("Redis sent a reply nothing asked for"))
            return
        for reply in replies:
            call = sent.popleft()
            script, _, future, _ = call
            if not isinstance(reply, ResponseError):
                if future is not None and not future.done():  # else its caller gave up
                    future.set_result(reply)
            elif script is not None and str(reply).startswith("NOSCRIPT"):
                retry.append(call)
            elif future is None:
                self.lost += script is not None
            elif not future.done():
                future.set_exception(reply)
        if not sent:
            if retry:  # once the whole batch is answered: in their order
                self._again(retry)
                self._retry = []
            self._soon = True  # the callers woken now may add calls to the next batch
            self._loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._soon = False
        self._flush()

    def garbled(self, link: _Link, exc: BaseException) -> None:
        """The protocol's callback: what Redis sent on ``link`` cannot be read (``exc``);
        the connection is dropped."""
        if link is self._link:
            self._drop(exc)
            self._flush()

    def _again(self, calls: list[Call]) -> None:
        """Queue ``calls`` (NOSCRIPT) first, each missing script loaded ahead of them."""
        scripts = {id(c[0]): c[0] for c in calls}.values()
        loads: list[Call] = [(None, hiredis.pack_command(("SCRIPT", "LOAD", s.script)), None,
                              calls[0][3]) for s in scripts]
        self._queue.extendleft(reversed(loads + calls))

    def lost_link(self, link: _Link, exc: BaseException | None) -> None:
        """The protocol's callback: ``link`` closed (Redis went away)."""
        if self._link is link:
            self._drop(ConnectionError(f"Redis closed the connection: {exc}"))
            self._flush()  # the calls queued meanwhile: on a new connection


class _Link(asyncio.Protocol):
    """The batcher's connection after redis-py's handshake: writes batches, parses the
    replies with one hiredis Reader and hands them over a read at a time."""

    def __init__(self, batcher: Batcher, conn: Any):
        self._batcher, self._conn = batcher, conn
        self._reader = hiredis.Reader(protocolError=InvalidResponse, replyError=ResponseError)
        self._transport: asyncio.Transport = conn._writer.transport  # noqa: SLF001
        self._transport.set_protocol(self)

    def write(self, data: bytes) -> None:
        self._transport.write(data)

    def close(self) -> None:
        self._transport.abort()
        self._conn._close()  # noqa: SLF001 (forget the streams redis-py made)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        replies = []
        try:
            while (reply := reader.gets()) is not False:
                replies.append(reply)
        except InvalidResponse as exc:
            self._batcher.garbled(self, exc)
            return
        if replies:
            self._batcher.replied(self, replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self._batcher.lost_link(self, exc)
