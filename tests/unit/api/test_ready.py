"""``/ready`` tells the truth: the collector's view (real polls of loopback metrics
endpoints) and the breakers, per pool, on a fake clock."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from fakes.clock import FakeClock
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.assemble.anchor import make_collector
from llmroute.types import Outcome

VLLM_METRICS = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 0.0
"""
DEAD = "http://127.0.0.1:9"  # nothing listens: every poll is refused


class Engine:
    """A loopback vLLM-style ``/metrics`` endpoint that can be switched off (500)."""

    def __init__(self) -> None:
        self.up = True
        self.base_url = ""

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=VLLM_METRICS) if self.up else web.Response(status=500)


@contextlib.asynccontextmanager
async def engine() -> AsyncIterator[Engine]:
    e = Engine()
    app = web.Application()
    app.router.add_get("/metrics", e.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    e.base_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        yield e
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def router(backends, **extra):
    """The app over ``backends`` with the clock replaced by a FakeClock, and a function that
    polls every backend once (the collector's real polls, on that clock)."""
    config = make_config(backends, breaker={"min_requests": 1, "cooldown_s": 30}, **extra)
    clock = FakeClock(100.0)
    async with open_router(config) as (rt, client), aiohttp.ClientSession() as session:
        rt.clock = clock
        collector = make_collector(config, rt.backends, rt.signals, session, clock)

        async def poll() -> None:
            for bid in collector.sources:
                await collector.poll_once(bid)

        yield rt, client, clock, poll


async def test_every_backend_down_is_503_even_with_closed_breakers():
    async with router([{"id": "a", "pool": "general", "base_url": DEAD},
                       {"id": "b", "pool": "general", "base_url": DEAD}]) as (rt, c, _, poll):
        assert (await c.get("/ready")).status_code == 200  # not polled yet: no evidence
        await poll()
        r = await c.get("/ready")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable" and body["usable_backends"] == []
    assert body["pools"] == {"general": {"ready": False, "serving": [],
                                         "reason": "every backend is dark (2 of 2)"}}
    row = body["backends"]["a"]
    assert row.pop("reason").startswith("dark: its last metrics poll failed (GET http://")
    assert row == {"pool": "general", "serving": False, "collector": "down",
                   "breaker": "closed"}
    assert body["reason"] == "no backend serves: pool general: every backend is dark (2 of 2)"


async def test_per_pool_view_names_the_pool_that_can_serve():
    async with engine() as live:
        async with router([{"id": "a", "pool": "code", "base_url": DEAD},
                           {"id": "b", "pool": "chat", "base_url": live.base_url}]
                          ) as (_, c, _, poll):
            await poll()
            r = await c.get("/ready")
    assert r.status_code == 200 and r.json()["usable_backends"] == ["b"]
    assert r.json()["pools"] == {"code": {"ready": False, "serving": [],
                                          "reason": "every backend is dark (1 of 1)"},
                                 "chat": {"ready": True, "serving": ["b"]}}
    assert "reason" not in r.json() and "reason" not in r.json()["backends"]["b"]


async def test_a_breaker_cooldown_does_not_make_a_down_engine_ready_again():
    async with engine() as eng:
        async with router([{"id": "a", "pool": "general", "base_url": eng.base_url}]
                          ) as (rt, c, clock, poll):
            await poll()
            assert (await c.get("/ready")).status_code == 200
            eng.up = False
            rt.breaker.record("a", Outcome.FAILURE, clock())  # traffic trips the breaker
            await poll()
            assert (await c.get("/ready")).status_code == 503
            clock.advance(31)  # the cool-down is over: half-open
            await poll()  # … but the engine still fails its polls
            r = await c.get("/ready")
            assert r.status_code == 503
            assert r.json()["backends"]["a"]["breaker"] == "half_open"
            assert r.json()["backends"]["a"]["collector"] == "down"
            eng.up = True
            await poll()
            assert (await c.get("/ready")).status_code == 200


async def test_stale_signals_are_not_ready():
    async with engine() as eng:
        async with router([{"id": "a", "pool": "general", "base_url": eng.base_url}]
                          ) as (_, c, clock, poll):
            await poll()
            clock.advance(2.5)  # stale_after_s is 2.0 and nothing polled since
            r = await c.get("/ready")
    assert r.status_code == 503 and r.json()["backends"]["a"]["collector"] == "stale"
    assert r.json()["backends"]["a"]["reason"] == "dark: its signals are 2.5 s old " \
        "(stale after 2 s)"


async def test_a_backend_without_metrics_counts_as_up_unless_its_breaker_is_open():
    async with router([{"id": "h", "pool": "general", "engine": "openai", "base_url": DEAD,
                        "model": "gpt"}]) as (rt, c, clock, poll):
        await poll()  # nothing to poll
        first = await c.get("/ready")
        rt.breaker.record("h", Outcome.FAILURE, clock())
        second = await c.get("/ready")
    assert first.status_code == 200
    assert first.json()["backends"]["h"]["collector"] == "unknown"
    assert second.status_code == 503
    assert second.json()["backends"]["h"]["reason"] == "its circuit breaker is open"
    assert second.json()["pools"]["general"]["reason"] == \
        "every backend's circuit breaker is open (1 of 1)"


@pytest.mark.parametrize("status", [503, 502], ids=["503", "502"])
async def test_real_traffic_opens_the_breaker_and_ready_follows(status):
    # the request path and /ready share the runtime's real monotonic clock here
    async with serve_upstream([("status", status)] * 4) as up:
        config = make_config([{"id": "a", "pool": "general", "engine": "openai", "model": "m",
                               "base_url": up.base_url}],
                             breaker={"min_requests": 1, "cooldown_s": 30})
        async with open_router(config) as (_, c):
            before = await c.get("/ready")
            sent = await c.post("/v1/chat/completions", json={
                "model": "auto", "messages": [{"role": "user", "content": "hi"}]})
            r = await c.get("/ready")
    assert before.status_code == 200 and sent.status_code >= 500
    assert r.status_code == 503 and r.json()["backends"]["a"]["breaker"] == "open"
