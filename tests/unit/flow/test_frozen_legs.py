"""A strategy's leg on a frozen engine fails over within the TTFT bound, as a plain request
does: every leg enters dispatch through its one door (``dispatch.send``), so the watchdog
cuts a non-streamed call once the collector has lost sight of the engine.

Scripted upstreams on loopback, polled by the real signal collector: the frozen one sends
its response headers and then nothing (``("freeze", s)``), and stops answering its
``/metrics`` polls, as a SIGSTOPped engine does. Its pool's other backend is made to look
busier, so the anchor sends the leg to the frozen one first.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fakes.router import open_router, strategy_config
from fakes.upstream import Upstream, serve_upstream

from llmroute.assemble.anchor import make_collector

CHAT = "/v1/chat/completions"
FREEZE_S = 30.0
TTFT_S = 0.5
GOOD = '{"name": "Ada", "age": 36}'
STRATEGIES = {
    "verify": 'kind: verify\npool: general\ncheck: {json_schema: {"type": "object"}}\n',
    "cascade": "kind: cascade\npools: [general, strong]\n",
    "fusion": "kind: fusion\nvoters: [{pool: general}, {pool: strong}]\n",
}


@contextlib.asynccontextmanager
async def polled_router(tmp_path: Path, kind: str, ups: dict[str, list[Upstream]]
                        ) -> AsyncIterator[Any]:
    """A router serving every request with the ``kind`` strategy over ``ups``, its
    collector polling every 50 ms (a poll gives up after 200 ms)."""
    folder = tmp_path / "strategies"
    folder.mkdir()
    (folder / "s.yaml").write_text(f"strategy_id: s\nversion: 1\n{STRATEGIES[kind]}",
                                   encoding="utf-8")
    config = strategy_config(ups, folder, timeouts={"ttft_s": TTFT_S},
                             retry={"max_attempts": 4, "backoff_base_s": 0.0},
                             anchor={"poll_interval_s": 0.05, "poll_timeout_s": 0.2})
    async with open_router(config) as (rt, client), aiohttp.ClientSession() as session:
        assert rt.signals is not None
        collector = make_collector(rt.config, rt.backends, rt.signals, session, rt.clock)
        collector.start()
        try:
            for _ in range(3):  # the healthy twin of the frozen engine looks busy
                rt.stats.sent("general-1", 1, rt.clock())
            yield rt, client
        finally:
            await collector.stop()


@pytest.mark.parametrize("kind", ["verify", "cascade", "fusion"])
async def test_a_leg_on_a_frozen_engine_fails_over_within_its_ttft_bound(tmp_path, kind):
    async with serve_upstream([("freeze", FREEZE_S)], GOOD, metrics=True) as frozen, \
            serve_upstream(["ok"], GOOD, metrics=True) as twin, \
            serve_upstream(["ok"], GOOD, metrics=True) as strong:
        ups = {"general": [frozen, twin], "strong": [strong]}
        async with polled_router(tmp_path, kind, ups) as (rt, client):
            answer = await client.post(CHAT, timeout=FREEZE_S * 2, headers={
                "x-request-id": f"frozen-{kind}"}, json={
                "model": "auto", "messages": [{"role": "user", "content": "A person?"}]})
            trace = rt.observer.ring.get(f"frozen-{kind}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == GOOD
    assert frozen.cancelled == 1  # the router closed the frozen engine's connection
    assert len(twin.requests) == 1  # the leg failed over inside its pool
    cut = next(s for s in trace.steps if s.name == "attempt")
    assert cut.fields["backend"] == "general-0"
    assert "stopped answering its metrics polls" in cut.fields["error"]
    assert cut.duration_ms < FREEZE_S * 1000 / 3  # cut past the TTFT bound, not thawed
