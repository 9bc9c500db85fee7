"""Warning lines a request causes carry its ``request_id`` (the ``x-request-id`` it was
answered with), so the log and ``llmroute trace ID`` meet."""

from __future__ import annotations

from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from structlog.testing import capture_logs

from llmroute.config import DegradationConfig
from llmroute.fuse.degrade import tiered


async def test_attempt_failed_and_fuse_handoff_name_the_request():
    async with serve_upstream([("status", 503)]) as a, serve_upstream([("cut", 2)]) as b, \
            serve_upstream(["ok"]) as c:
        cfg = make_config([{"id": f"b{i}", "pool": "p", "base_url": up.base_url}
                           for i, up in enumerate((a, b, c))])
        async with open_router(cfg) as (_, client):
            with capture_logs() as logs:
                r = await client.post("/v1/chat/completions", json={
                    "model": "auto", "stream": True,
                    "messages": [{"role": "user", "content": "hi"}]})
    rid = r.headers["x-request-id"]
    warned = {e["event"]: e for e in logs if e["log_level"] == "warning"}
    assert {"attempt_failed", "fuse_handoff"} <= warned.keys(), warned
    assert all(e["request_id"] == rid for e in warned.values())


def test_a_degraded_pool_names_the_request_that_met_it():
    with capture_logs() as logs:
        assert tiered([], "p", 0.5, DegradationConfig(canned_answer="busy"), "r-1") is None
    line = next(e for e in logs if e["event"] == "pool_degraded")
    assert (line["pool"], line["request_id"]) == ("p", "r-1")
