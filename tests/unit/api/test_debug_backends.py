"""``GET /debug/backends`` over a real Runtime (httpx.ASGITransport), and the live table that
renders it."""

from __future__ import annotations

import io

from fakes.anchor_ctx import signals
from fakes.router import make_config, open_router
from rich.console import Console

from llmroute.anchor.presets import presets
from llmroute.cli.anchor import render
from llmroute.types import Outcome

BACKENDS = [{"id": "v1", "pool": "p", "base_url": "http://127.0.0.1:9"},
            {"id": "v2", "pool": "p", "base_url": "http://127.0.0.1:9"},
            {"id": "o1", "pool": "q", "engine": "ollama", "base_url": "http://127.0.0.1:9"}]


async def test_debug_backends_shows_signals_ages_scores_and_breakers():
    config = make_config(BACKENDS, anchor={"stale_after_s": 2.0},
                         breaker={"min_requests": 1, "failure_rate": 0.5})
    async with open_router(config) as (rt, client):
        now = rt.clock()
        rt.signals.record_ok("v1", signals(now - 0.5, waiting=4, kv_cache_usage=0.5), now)
        rt.signals.record_ok("v2", signals(now - 10, waiting=0, kv_cache_usage=0.1), now)
        rt.breaker.record("o1", Outcome.FAILURE, now)
        rt.stats.sent("v1", 1, now)
        body = (await client.get("/debug/backends")).json()
    rows = {r["id"]: r for r in body["backends"]}
    assert set(body["weights"]) == set(dict(presets()["default"].weights))
    v1, v2, o1 = rows["v1"], rows["v2"], rows["o1"]
    assert v1["signals"]["waiting"]["value"] == 4
    waiting = v1["signals"]["waiting"]
    assert 0.5 <= waiting["age_s"] < 2.0 and not waiting["stale"]
    assert v2["signals"]["waiting"]["stale"] and v2["signals"]["waiting"]["age_s"] >= 10
    assert v1["scores"]["queue-depth"] == 0.2 and v2["scores"]["queue-depth"] is None
    assert v1["scores"]["in-flight"] == 0.5 and v1["router"]["in_flight"] == 1
    assert v1["total"] is not None and v2["total"] is not None
    assert v1["collector"]["state"] == "up" and o1["collector"]["state"] == "unknown"
    assert o1["breaker"] == "open" and v1["breaker"] == "closed"
    assert v1["logprobs"] is True and o1["logprobs"] is False


async def test_backends_table_renders_the_report():
    config = make_config(BACKENDS)
    async with open_router(config) as (rt, client):
        rt.signals.record_ok("v1", signals(rt.clock(), waiting=4, running=2), rt.clock())
        body = (await client.get("/debug/backends")).json()
    out = io.StringIO()
    Console(file=out, width=250, color_system=None).print(render(body))
    text = out.getvalue()
    assert "v1" in text and "o1" in text and "queue 0.20" in text
    line = next(ln for ln in text.splitlines() if "v1" in ln)
    assert " 2/4 " in line and "closed" in line and " up " in line
    narrow = io.StringIO()
    Console(file=narrow, width=100, color_system=None).print(render(body, wide=False))
    assert "v1" in narrow.getvalue() and "scores" not in narrow.getvalue()
