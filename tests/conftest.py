"""Fixtures shared by every test folder: a real Redis server (``fakes/redis.py``)."""

from __future__ import annotations

import pytest
from fakes.redis import MISSING, RedisServer, find_redis_server


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """One redis-server for the session (tests keep apart by key prefix); skips when no
    binary is installed."""
    binary = find_redis_server()
    if binary is None:
        pytest.skip(MISSING)
    server = RedisServer(binary, tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of this test's own, to kill, pause and restart; skips without one."""
    binary = find_redis_server()
    if binary is None:
        pytest.skip(MISSING)
    server = RedisServer(binary, tmp_path)
    server.start()
    yield server
    server.resume()
    server.stop()
