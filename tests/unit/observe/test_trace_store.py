"""The SQLite trace store: traces found after they leave the ring and after a restart, the
store's bounds, a disk that refuses writes, and ``llmroute trace --store``."""

from __future__ import annotations

import sqlite3
from typing import Any

from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import Counter, CollectorRegistry

from llmroute.cli.main import main
from llmroute.config.observe import TraceStoreConfig
from llmroute.observe.trace import Step, Trace
from llmroute.observe.trace_store import TraceStore

CHAT = "/v1/chat/completions"


def chat() -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": "Tell me a fox tale."}]}


def stored(path: Any, ring: int = 1) -> Any:
    return {"trace_ring": ring, "trace_store": {"path": str(path)}}


def config(up: Any, path: Any) -> Any:
    return make_config([{"id": "b0", "pool": "general", "base_url": up.base_url}],
                       observe=stored(path))


def counters() -> tuple[Counter, Counter]:
    r = CollectorRegistry()
    return Counter("d", "d", registry=r), Counter("f", "f", registry=r)


def trace(rid: str, at: float) -> Trace:
    return Trace(rid, rid, at, 1.5, 200, {"backend": "b0"},
                 (Step("gate", 0.0, 0.5, {"intent": "chat"}),), "00f067aa0ba902b7", None)


async def test_a_trace_is_found_after_the_ring_forgot_it_and_after_a_restart(tmp_path,
                                                                              capsys):
    db = tmp_path / "traces.sqlite3"
    async with serve_upstream(["ok"]) as up:
        async with open_router(config(up, db)) as (rt, client):
            await client.post(CHAT, json=chat(), headers={"x-request-id": "old"})
            await client.post(CHAT, json=chat(), headers={"x-request-id": "new"})
            await rt.observer.store.flush()
            assert rt.observer.ring.get("old") is None  # the ring holds one
            first = (await client.get("/trace/old")).json()
            await rt.observer.close()
        async with open_router(config(up, db)) as (_, client):  # a restart
            again = await client.get("/trace/old")
            missing = await client.get("/trace/never")
    assert first["request_id"] == "old" and first["backend"] == "b0"
    assert [s["step"] for s in first["steps"]][-2:] == ["attempt", "response"]
    assert again.status_code == 200 and again.json() == first
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "request_id"
    assert main(["trace", "old", "--store", str(db)]) == 0
    assert "attempt" in capsys.readouterr().out
    assert main(["trace", "never", "--store", str(db)]) == 1


async def test_the_store_keeps_at_most_max_traces_newest_first(tmp_path):
    db = tmp_path / "t.sqlite3"
    store = TraceStore(TraceStoreConfig(path=str(db), max_traces=10, retention_days=None),
                       *counters())
    for i in range(35):
        store.put(trace(f"r{i}", 1000.0 + i))
        await store.flush()
    got = [await store.get(f"r{i}") for i in range(35)]
    await store.close()
    rows = sqlite3.connect(db).execute("SELECT COUNT(*) FROM traces").fetchone()[0]
    assert rows <= 20 and got[-1] == trace("r34", 1034.0)
    assert got[0] is None and all(t is not None for t in got[-10:])


async def test_a_refusing_disk_keeps_serving_and_counts(tmp_path):
    dropped, failures = counters()
    store = TraceStore(TraceStoreConfig(path=str(tmp_path / "no" / "t.sqlite3")),
                       dropped, failures)
    store.put(trace("x", 1.0))
    await store.flush()
    assert failures._value.get() == 1 and await store.get("x") is None
    await store.close()


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.sampled_from(["intent", "tenant", "pool"]), st.text(max_size=8)),
       st.floats(0, 1e6), st.text(min_size=1, max_size=20))
def test_a_trace_survives_its_json(summary, duration, rid):
    t = Trace(rid, rid, 12.5, duration, 200, summary,
              (Step("anchor", 0.1, 0.2, {"candidates": []}),), "a" * 16, None)
    assert Trace.from_json(t.to_json()).to_json() == t.to_json()  # JSON rounds to µs
