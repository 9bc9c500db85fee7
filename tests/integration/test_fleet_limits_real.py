"""The fleet-wide limit, proved with real parts: three ``llmroute serve`` processes (each on
its own port) on one scripted upstream share one real redis-server; 200 concurrent clients
spread round-robin over them. The keys live in one SQLite key store on a shared path (the
limits' state is in Redis; the key records need not be). A key with ``rpm: 60`` gets
exactly 60 requests admitted across the fleet, plus what the bucket refills while the burst
runs (1 per second), overshoot at most 1. Killing Redis mid-load fails no request (the
limits fail open), and once it is back the limits hold again."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.fakes.fleet import ADMIN_KEY, create_key, fleet_config
from tests.fakes.fleet import replicas as fleet
from tests.fakes.upstream import serve_upstream

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
pytestmark = pytest.mark.slow


async def _burst(client: httpx.AsyncClient, replicas, key: str, n: int) -> tuple[list[int], float]:
    """``n`` concurrent requests with ``key``, request i to replica i mod 3; their statuses
    and the seconds from the first send to the last answer."""
    started = time.monotonic()
    replies = await asyncio.gather(*[
        client.post(replicas[i % len(replicas)].url + "/v1/chat/completions", json=CHAT,
                    headers={"authorization": f"Bearer {key}"}) for i in range(n)])
    return [r.status_code for r in replies], time.monotonic() - started


def _assert_exact(codes: list[int], elapsed_s: float, rpm: int = 60) -> None:
    admitted = codes.count(200)
    refill = int(elapsed_s * rpm / 60)
    assert set(codes) <= {200, 429}, codes
    assert rpm <= admitted <= rpm + refill + 1, (admitted, elapsed_s)


async def _load(client, replicas, key: str, until: float, lanes: int = 24) -> list[int]:
    """Closed-loop load: ``lanes`` clients each sending one request after another (lane i
    to replica i mod 3) until ``until`` (monotonic s); every status."""
    async def lane(i: int) -> list[int]:
        out: list[int] = []
        while time.monotonic() < until:
            r = await client.post(replicas[i % len(replicas)].url + "/v1/chat/completions",
                                  json=CHAT, headers={"authorization": f"Bearer {key}"})
            out.append(r.status_code)
        return out

    return [c for codes in await asyncio.gather(*[lane(i) for i in range(lanes)]) for c in codes]


async def test_rpm_60_is_exact_across_three_replicas_and_survives_a_redis_outage(
        tmp_path, own_redis):
    async with serve_upstream(["ok"]) as up:
        config = fleet_config(tmp_path, own_redis.url, [{"id": "a", "base_url": up.base_url}],
                              state={"retry_s": 0.2})
        limited = create_key(config, "--rpm", "60")
        busy = create_key(config, "--rpm", "1000000", "--max-concurrency", "1000")
        after = create_key(config, "--rpm", "60")
        async with fleet(config) as replicas, httpx.AsyncClient(
                timeout=60, limits=httpx.Limits(max_connections=400)) as client:
            for r in replicas:  # warm: the key cached, connections open
                assert (await client.post(r.url + "/v1/chat/completions", json=CHAT, headers={
                    "authorization": f"Bearer {busy}"})).status_code == 200
            codes, elapsed = await _burst(client, replicas, limited, 200)
            _assert_exact(codes, elapsed)

            loading = asyncio.create_task(_load(client, replicas, busy, time.monotonic() + 4))
            await asyncio.sleep(1.0)
            own_redis.kill()
            await asyncio.sleep(1.5)
            own_redis.start()
            during = await loading
            await asyncio.sleep(0.5)  # past state.retry_s: each replica uses Redis again
            codes, elapsed = await _burst(client, replicas, after, 200)
            metrics = (await client.get(replicas[0].url + "/metrics", headers={
                "authorization": f"Bearer {ADMIN_KEY}"})).text
    assert during and set(during) == {200}, sorted(set(during))
    _assert_exact(codes, elapsed)
    assert "llmroute_state_outages_total 1.0" in metrics
    assert "llmroute_state_up 1.0" in metrics


async def _open_at(client: httpx.AsyncClient, replica, deadline: float) -> float:
    """The monotonic time at which ``replica``'s /metrics first shows backend a open."""
    while time.monotonic() < deadline:
        text = (await client.get(replica.url + "/metrics", headers={
            "authorization": f"Bearer {ADMIN_KEY}"})).text
        if 'llmroute_breaker_state{backend="a"} 2.0' in text:
            return time.monotonic()
        await asyncio.sleep(0.02)
    raise AssertionError(f"the breaker never opened on {replica.url}")


async def test_a_failing_engine_opens_its_breaker_on_every_replica_within_a_second(
        tmp_path, redis_server):
    async with serve_upstream(["ok"]) as up:
        config = fleet_config(tmp_path, redis_server.url, [{"id": "a", "base_url": up.base_url}],
                              breaker={"min_requests": 4, "failure_rate": 0.5,
                                       "cooldown_s": 30})
        key = create_key(config)
        async with fleet(config) as replicas, httpx.AsyncClient(timeout=30) as client:
            for r in replicas:
                assert (await client.post(r.url + "/v1/chat/completions", json=CHAT, headers={
                    "authorization": f"Bearer {key}"})).status_code == 200
            up.script[:] = [("status", 502, None)]  # the engine starts failing
            deadline = time.monotonic() + 20
            watching = [asyncio.create_task(_open_at(client, r, deadline)) for r in replicas]
            for _ in range(8):  # only replica 0 sees the failures
                await client.post(replicas[0].url + "/v1/chat/completions", json=CHAT,
                                  headers={"authorization": f"Bearer {key}"})
            opened = await asyncio.gather(*watching)
    assert max(opened) - opened[0] < 1.0, opened
