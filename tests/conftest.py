"""Fixtures shared by every test folder: a real Redis server (``fakes/redis.py``); and
Hypothesis without its per-example deadline — a wall-clock limit is a timed assertion, which
the tests do not make (speed is the benchmarks'), and a loaded machine stretches one example
past the default 200 ms."""

from __future__ import annotations

import pytest
from fakes.redis import MISSING, RedisServer, find_redis_server
from hypothesis import settings

settings.register_profile("llmroute", deadline=None)
settings.load_profile("llmroute")


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
