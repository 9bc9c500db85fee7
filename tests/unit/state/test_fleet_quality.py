"""Quality ejection shared by two replicas through a real Redis: each replica's answers go
into the fleet's tallies, so a backend that only one replica saw melt is demoted on both;
a replica that loses Redis keeps its own view (its states, its own answers) and converges
with the other once Redis is back."""

from __future__ import annotations

import contextlib
import time

import pytest
import redis.asyncio as aioredis

from llmroute.assemble.healing import Healing
from llmroute.config.quality import QualityConfig
from llmroute.observe.quality import QualityEvents
from llmroute.state.load import FleetLoad, add_tallies
from llmroute.types import Answer
from tests.fakes.clock import FakeClock

pytestmark = [pytest.mark.slow, pytest.mark.redis]
POOLS = {"p": ("x", "y", "z")}
CFG = QualityConfig(min_answers=10, alpha=1e-3, cut_s=1.0, window_s=3600)


@contextlib.asynccontextmanager
async def replicas(url: str, clock: FakeClock):
    prefix = f"q{time.time_ns()}:"
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for _ in range(2):
            redis = aioredis.Redis.from_url(url, socket_timeout=0.2,
                                            socket_connect_timeout=0.2)
            stack.push_async_callback(redis.aclose)
            heal = Healing(CFG, POOLS, clock, QualityEvents(None, clock))
            out.append((heal, FleetLoad(heal.tracker, redis, clock, prefix=prefix,
                                        key="quality", add=add_tallies, stale_s=30.0,
                                        timeout_s=0.2)))
        yield out


def answer(heal: Healing, bid: str, n: int, bad: bool = False) -> None:
    heal.tracker.record([Answer(bid, heal.clock(), "handoff" if bad else None)] * n)


async def exchange(pairs, times: int = 2) -> None:
    for _ in range(times):
        for _, load in pairs:
            await load.exchange()


def states(heal: Healing) -> dict[str, str]:
    return {b: heal.ejector.state(b).value for b in POOLS["p"]}


async def test_the_fleet_judges_every_replicas_answers_and_survives_losing_redis(own_redis):
    clock = FakeClock(10.0)
    async with replicas(own_redis.url, clock) as pairs:
        (a, _), (b, _) = pairs
        answer(a, "x", 6)
        answer(a, "x", 6, bad=True)  # only replica a sees x melt (half its answers)
        answer(b, "y", 20)
        answer(a, "z", 20)
        await exchange(pairs)
        assert [m.new.value for m in a.tick()] == ["cut"]
        assert [m.new.value for m in b.tick()] == ["cut"]  # b never saw x itself
        assert b.tracker.tallies(clock())["x"].bad == 6
        own_redis.kill()
        await exchange(pairs, times=1)  # both lose the others' tallies …
        assert b.tracker.tallies(clock()).get("x") is None
        clock.advance(2.0)
        assert states(b)["x"] == "cut" and b.tick()[0].new.value == "healthy"  # … b alone
        assert [m.new.value for m in a.tick()] == ["ejected"]  # a still sees its evidence
        own_redis.start()
        answer(a, "x", 6)
        answer(a, "x", 6, bad=True)
        await exchange(pairs, times=3)
        assert [m.new.value for m in b.tick()] == ["cut"]  # b converges with a again
        assert b.tracker.tallies(clock())["x"].bad == 6
