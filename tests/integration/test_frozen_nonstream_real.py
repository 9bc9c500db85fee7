"""A non-streamed request in flight on a real ``llama-server`` that freezes (SIGSTOP) fails
over within its TTFT bound: the engine sends nothing until its answer is complete, so the
router's watchdog asks the collector once the bound has passed, sees the engine dark, cuts the
call and the other engine answers.

Two small engines (SmolLM2-135M). Skipped when the engine binary or the model is missing —
except in CI (``CI`` set), where that fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest
from fakes.real import real_router

pytestmark = pytest.mark.slow

TTFT_S = 2.0
CONFIG = f"""\
gate: {{kind: off}}
timeouts: {{ttft_s: {TTFT_S}}}
anchor: {{poll_interval_s: 0.1, poll_timeout_s: 0.3, stale_after_s: 1.0}}
pools: {{general: {{}}}}
backends:
  - {{id: one, pool: general, engine: llamacpp, launch: {{ctx_size: 1024, slots: 2, threads: 1}}}}
  - {{id: two, pool: general, engine: llamacpp, launch: {{ctx_size: 1024, slots: 2, threads: 1}}}}
routing: {{default_pool: general}}
"""
BODY = {"model": "auto", "max_tokens": 48, "temperature": 0, "stream": False,
        "messages": [{"role": "user", "content": "Count from one to forty in words."}]}


async def test_a_non_streamed_request_on_a_frozen_engine_fails_over_within_ttft() -> None:
    async with real_router(CONFIG, "test_frozen_nonstream_real") as (rt, url), \
            httpx.AsyncClient(base_url=url, timeout=60) as http:
        assert (await http.post("/v1/chat/completions", json=BODY)).status_code == 200
        sent = asyncio.create_task(http.post("/v1/chat/completions", json=BODY,
                                             headers={"x-request-id": "frozen-nonstream"}))
        victim = None
        while victim is None:
            stats = rt.stats.snapshot(rt.clock()).stats
            victim = next((b for b, s in stats.items() if s.in_flight), None)
            await asyncio.sleep(0.005)
        assert rt.fleet is not None
        pid = rt.fleet.engines[victim].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            resp = await sent
            took = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
        trace = rt.observer.ring.get("frozen-nonstream")
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-llmroute-backend"] != victim
    first = next(s for s in trace.steps if s.name == "attempt")
    assert first.fields["backend"] == victim and "stopped answering" in first.fields["error"]
    assert first.duration_ms < (TTFT_S + 1.5) * 1000  # cut just past the bound, not 600 s
    assert took < TTFT_S + 30  # the other engine's answer included
