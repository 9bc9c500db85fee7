"""``llmroute trace`` against a running router and ``llmroute audit verify|show|query`` on a
live audit log: exit 0 when intact, 1 naming the first broken record after an edit."""

from __future__ import annotations

import asyncio
import json
import sqlite3

from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from llmroute.cli.main import main

CHAT = "/v1/chat/completions"


def chat() -> dict[str, object]:
    return {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


async def test_trace_prints_a_timeline_from_a_running_router(capsys):
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (rt, client), \
                serve_in_background(create_app(cfg, runtime=rt)) as url:
            await client.post(CHAT, json=chat(), headers={"x-request-id": "t-1"})
            capsys.readouterr()  # the request's log line
            ok = await asyncio.to_thread(main, ["trace", "t-1", "--url", url])
            text = capsys.readouterr().out
            missing = await asyncio.to_thread(main, ["trace", "nope", "--url", url])
            err = capsys.readouterr().err
    assert ok == 0 and missing == 1 and "no trace for request 'nope'" in err
    lines = text.splitlines()
    assert lines[0].startswith("request t-1  trace t-1  status 200")
    assert "backend a" in lines[1]
    steps = [line.split()[2] for line in lines[3:]]
    assert steps == ["receive", "gate", "strategy", "anchor", "attempt", "response"]


async def test_audit_verify_show_and_query_on_a_live_log(tmp_path, capsys):
    path = str(tmp_path / "audit.sqlite3")
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          observe={"audit": {"path": path}})
        async with open_router(cfg) as (rt, client):
            for i in range(3):
                await client.post(CHAT, json=chat(), headers={"x-request-id": f"r{i}"})
            assert rt.observer.audit is not None
            await rt.observer.audit.close()
    capsys.readouterr()
    assert main(["audit", "verify", "--path", path]) == 0
    assert "intact: 3 records" in capsys.readouterr().out
    assert main(["audit", "show", "r1", "--path", path]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["request_id"] == "r1" and shown["seq"] == 2 and shown["backend"] == "a"
    assert main(["audit", "query", "--since", "0", "--backend", "a", "--path", path]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["audit", "query", "--since", "2000-01-01T00:00:00", "--backend", "zz",
                 "--path", path]) == 0
    assert capsys.readouterr().out == ""
    with sqlite3.connect(path) as conn:
        text = conn.execute("SELECT record FROM audit WHERE seq = 2").fetchone()[0]
        conn.execute("UPDATE audit SET record = ? WHERE seq = 2",
                     (text.replace('"backend":"a"', '"backend":"b"', 1),))
    assert main(["audit", "verify", "--path", path]) == 1
    assert "broken at record 2" in capsys.readouterr().out


def test_audit_without_a_database_is_a_clear_error(tmp_path, capsys):
    assert main(["audit", "verify", "--path", str(tmp_path / "none.sqlite3")]) == 2
    assert "no audit database" in capsys.readouterr().err
