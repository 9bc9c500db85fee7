"""Quality ejection through the real app (scripted upstreams on loopback, a fake clock for
the healing loop): a backend whose streams the fuse keeps handing off is ejected,
probed and brought back once its answers are good again — and every step is an event: the
gauge, the log line, the audit record, the trace note on requests, ``/debug/backends``."""

from __future__ import annotations

import contextlib
import json

import structlog
from fakes.clock import FakeClock
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.observe import audit_chain

QUALITY = {"min_answers": 5, "alpha": 1e-3, "cut_s": 5.0, "cooloff_s": 10.0,
           "cut_share": 0.25, "probe_share": 1.0, "window_s": 3600}
BODY = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


@contextlib.asynccontextmanager
async def pool(tmp_path):
    async with serve_upstream([("entropic", 0)]) as bad, serve_upstream(["ok"]) as g1, \
            serve_upstream(["ok"]) as g2:
        cfg = make_config(
            [{"id": i, "pool": "general", "base_url": u.base_url}
             for i, u in (("bad", bad), ("good-1", g1), ("good-2", g2))],
            quality=QUALITY, anchor={"picker": "round-robin"},
            observe={"audit": {"path": str(tmp_path / "audit.sqlite3")}})
        async with open_router(cfg) as (rt, client):
            clock = FakeClock(1000.0)
            rt.healing.clock = clock
            yield rt, client, clock, bad


async def send(client, n: int) -> list[str]:
    """``n`` streamed requests; the request id of each."""
    ids = []
    for _ in range(n):
        r = await client.post("/v1/chat/completions", json=BODY)
        assert r.status_code == 200 and "[DONE]" in r.text
        ids.append(r.headers["x-request-id"])
    return ids


def state(text: str, backend: str) -> float:
    line = next(x for x in text.splitlines()
                if x.startswith(f'llmroute_backend_quality_state{{backend="{backend}"}}'))
    return float(line.split()[-1])


async def test_a_backend_whose_answers_melt_is_demoted_and_probed_back(tmp_path):
    async with pool(tmp_path) as (rt, client, clock, bad):
        await send(client, 18)  # round robin: a third of them start on "bad", and melt
        melted = rt.healing.tracker.tallies(clock())["bad"]
        assert (melted.answers, melted.handoff) == (6, 6)  # each melt counted once, live
        with structlog.testing.capture_logs() as logs:
            moves = rt.healing.tick()
        # every answer of it melts: overwhelming evidence, ejected without a cut first
        assert [(m.backend_id, m.new.value) for m in moves] == [("bad", "ejected")]
        assert state((await client.get("/metrics")).text, "bad") == 3.0
        assert any(e["event"] == "quality_state" and e["state"] == "ejected" for e in logs)
        before = len(bad.requests)
        ids = await send(client, 20)
        trace = (await client.get(f"/trace/{ids[-1]}")).json()
        note = next(s for s in trace["steps"] if s["step"] == "quality")
        assert note["demoted"] == {"bad": "ejected"}
        assert len(bad.requests) == before  # ejected: no request reaches it
        report = {r["id"]: r for r in (await client.get("/debug/backends")).json()["backends"]}
        assert report["bad"]["quality"]["state"] == "ejected"
        assert report["bad"]["quality"]["share"] == 0.0
        bad.script = ["ok"]  # the engine is mended
        clock.advance(11.0)
        assert [m.new.value for m in rt.healing.tick()] == ["probing"]
        await send(client, 18)
        assert len(bad.requests) >= before + 5  # probes reach it
        assert [m.new.value for m in rt.healing.tick()] == ["healthy"]
        assert state((await client.get("/metrics")).text, "bad") == 0.0
        await rt.observer.close()
    conn = audit_chain.connect(str(tmp_path / "audit.sqlite3"))
    rows = [r for r in (json.loads(x) for (x,) in conn.execute(
        "SELECT record FROM audit ORDER BY seq")) if r.get("kind") == "quality"]
    assert audit_chain.verify(conn).ok
    assert [(r["backend"], r["to"]) for r in rows] == [
        ("bad", "ejected"), ("bad", "probing"), ("bad", "healthy")]
    assert rows[0]["evidence"]["bad"] >= 5


async def test_a_demotion_past_the_pool_bound_is_refused_and_logged(tmp_path):
    async with serve_upstream([("entropic", 0)]) as b1, serve_upstream([("entropic", 0)]) as b2, \
            serve_upstream(["ok"]) as good:
        cfg = make_config([{"id": i, "pool": "general", "base_url": u.base_url}
                           for i, u in (("bad-1", b1), ("bad-2", b2), ("good", good))],
                          quality={**QUALITY, "max_pool_share": 0.34},
                          anchor={"picker": "round-robin"})
        async with open_router(cfg) as (rt, client):
            rt.healing.clock = FakeClock(5.0)
            await send(client, 30)
            with structlog.testing.capture_logs() as logs:
                moves = rt.healing.tick()
                again = rt.healing.tick()
            text = (await client.get("/metrics")).text
    assert [(m.backend_id, m.new.value, m.refused) for m in moves] == [
        ("bad-1", "ejected", False), ("bad-2", "healthy", True)]
    assert again == []  # one refusal per stretch of a firing test
    refused = [e for e in logs if e["event"] == "quality_demotion_refused"]
    assert len(refused) == 1 and "at most 34%" in refused[0]["why"]
    assert 'llmroute_quality_refusals_total{backend="bad-2"} 1.0' in text
