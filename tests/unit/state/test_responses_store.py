"""The response stores (``state/responses.py`` SQLite, ``state/responses_redis.py`` on a real
Redis) pass one contract: a record comes back with its owner, a delete needs the owner, a
record lapses after its TTL, and the oldest go first past ``max_entries``."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from llmroute.errors import StateUnavailable
from llmroute.state.responses import PRUNE_EVERY, SqliteResponses
from llmroute.state.responses_redis import RedisResponses


class Clock:
    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "redis"])
def make(request, tmp_path):
    made: list[object] = []

    def build(ttl_s: float = 60.0, max_entries: int = 1000):
        if request.param == "sqlite":
            clock = Clock()
            store = SqliteResponses(str(tmp_path / f"r{len(made)}.db"), ttl_s, max_entries,
                                    clock)
        else:
            server = request.getfixturevalue("redis_server")
            clock = None
            store = RedisResponses(server.url, 1.0, ttl_s, max_entries,
                                   prefix=f"t{uuid.uuid4().hex[:8]}:")
        made.append(store)
        return store, clock

    return build


async def test_a_record_comes_back_with_its_owner(make):
    store, _ = make()
    await store.put("resp_1", "acme", b'{"a": 1}')
    assert await store.get("resp_1") == ("acme", b'{"a": 1}')
    assert await store.get("resp_2") is None
    await store.close()


async def test_only_the_owner_deletes(make):
    store, _ = make()
    await store.put("resp_1", "acme", b"x")
    assert not await store.delete("resp_1", "globex")
    assert await store.get("resp_1") == ("acme", b"x")
    assert await store.delete("resp_1", "acme")
    assert await store.get("resp_1") is None
    assert not await store.delete("resp_1", "acme")
    await store.close()


async def test_a_record_lapses_after_its_ttl(make):
    store, clock = make(ttl_s=0.2)
    await store.put("resp_1", "", b"x")
    if clock is None:
        await asyncio.sleep(0.3)
    else:
        clock.now += 0.3
    assert await store.get("resp_1") is None
    await store.close()


async def test_the_oldest_go_first_past_max_entries(make):
    store, clock = make(max_entries=5)
    for i in range(PRUNE_EVERY):
        if clock is not None:
            clock.now += 1
        await store.put(f"resp_{i}", "", b"x")
    kept = [i for i in range(PRUNE_EVERY) if await store.get(f"resp_{i}") is not None]
    assert kept == list(range(PRUNE_EVERY - 5, PRUNE_EVERY))
    await store.close()


async def test_an_unreachable_redis_is_state_unavailable():
    store = RedisResponses("redis://127.0.0.1:9/0", 0.2, 60.0, 10)
    with pytest.raises(StateUnavailable):
        await store.get("resp_1")
    await store.close()


async def test_an_unusable_sqlite_file_is_state_unavailable(tmp_path):
    store = SqliteResponses(str(tmp_path / "missing" / "r.db"), 60.0, 10)
    with pytest.raises(StateUnavailable):
        await store.put("resp_1", "", b"x")
