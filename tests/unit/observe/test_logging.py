"""The JSON log chain's direct request line: the bytes structlog's chain writes for
``log.info(event, **fields)``, used only while that chain (and its level) is in effect;
request lines held in the shared buffer and written in order with every other line."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import re
import subprocess
import sys

import orjson
import pytest
import structlog
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from structlog.testing import capture_logs

from llmroute.observe.logging import FLUSH_S, HOLD_BYTES, configure_logging, direct_lines

STAMP = re.compile(rb'"timestamp":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z"')


@pytest.fixture
def restored():
    """structlog's configuration is put back after the test."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def test_the_direct_line_is_the_chains_line(restored, capsysbinary):
    configure_logging("info", json=True)  # on the captured stderr
    fields = {"request_id": "r1", "intent": "chat", "status": 200, "ttft_ms": None,
              "duration_ms": 4.097, "tokens_in": 12, "handoffs": 0, "answer": "汉字 ok"}
    structlog.get_logger("llmroute.request").info("request", **fields)
    lines = direct_lines()
    assert lines is not None and lines.min_level == logging.INFO
    lines.info("request", dict(fields))
    chain, direct = capsysbinary.readouterr().err.splitlines(keepends=True)
    assert STAMP.search(chain) and STAMP.search(direct)
    assert STAMP.sub(b"", chain) == STAMP.sub(b"", direct)
    assert list(orjson.loads(direct)) == [*fields, "event", "level", "timestamp"]


@pytest.mark.parametrize("micro", [0, 5, 123456])
def test_orjson_prints_the_timestamp_as_the_chains_timestamper(micro):
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, micro, tzinfo=datetime.timezone.utc)
    stamper = at.isoformat().replace("+00:00", "Z")  # structlog's TimeStamper(fmt="iso")
    assert orjson.dumps(at, option=orjson.OPT_UTC_Z) == orjson.dumps(stamper)


def test_other_configurations_log_through_structlog(restored):
    configure_logging("warning", json=True)
    lines = direct_lines()
    assert lines is not None and lines.min_level > logging.INFO  # the Observer writes none
    with capture_logs():
        assert direct_lines() is None
    assert direct_lines() is lines
    configure_logging("info", json=False)
    assert direct_lines() is None


async def serve_one(request_id: str, content: str, close: bool = False) -> None:
    """One chat request through a router over a scripted upstream; ``close``: the observer
    is closed before the router stops (as the runtime's exit stack does at shutdown)."""
    async with serve_upstream(["ok"]) as up, \
            open_router(make_config([{"id": "a", "pool": "general",
                                      "base_url": up.base_url}])) as (rt, client):
        await client.post("/v1/chat/completions", headers={"x-request-id": request_id},
                          json={"model": "auto",
                                "messages": [{"role": "user", "content": content}]})
        if close:
            await rt.observer.close()


async def test_a_served_request_writes_one_json_line_directly(restored, capsysbinary):
    configure_logging("info", json=True)
    await serve_one("j1", "secret words")
    lines = [orjson.loads(x) for x in capsysbinary.readouterr().err.splitlines()
             if b'"event":"request"' in x]
    assert len(lines) == 1
    line = lines[0]
    assert line["request_id"] == "j1" and line["backend"] == "a" and line["status"] == 200
    assert line["level"] == "info" and list(line)[-3:] == ["event", "level", "timestamp"]
    assert "secret" not in str(line)


async def test_request_lines_are_held_and_written_before_any_other_line(restored, capfd):
    configure_logging("info", json=True)  # capfd's stderr has a descriptor: lines are held
    lines = direct_lines()
    lines.info("request", {"request_id": "r1"})
    lines.info("request", {"request_id": "r2"})
    assert capfd.readouterr().err == ""
    structlog.get_logger("x").warning("other")  # written after the held lines, in order
    lines.info("request", {"request_id": "r3"})
    out = [orjson.loads(x) for x in capfd.readouterr().err.splitlines()]
    assert [x.get("request_id", x["event"]) for x in out] == ["r1", "r2", "other"]
    await asyncio.sleep(FLUSH_S * 3)  # the loop's timer writes r3
    assert [orjson.loads(x)["request_id"] for x in capfd.readouterr().err.splitlines()] \
        == ["r3"]
    lines.info("request", {"request_id": "r4"})
    lines.flush()  # as Observer.close does at shutdown
    assert '"r4"' in capfd.readouterr().err


def test_without_a_running_loop_each_line_is_written_at_once(restored, capfd):
    configure_logging("info", json=True)
    direct_lines().info("request", {"request_id": "r1"})
    assert '"r1"' in capfd.readouterr().err


async def test_held_lines_go_out_whole_when_the_buffer_fills(restored, capfd):
    configure_logging("info", json=True)
    lines = direct_lines()
    line = {"request_id": "r", "pad": "x" * 200}
    n = HOLD_BYTES // 200 + 5  # more than the buffer holds
    for i in range(n):
        lines.info("request", {**line, "request_id": f"r{i}"})
    written = capfd.readouterr().err
    assert 0 < len(written) <= HOLD_BYTES and written.endswith("\n")  # whole lines only
    lines.flush()
    every = (written + capfd.readouterr().err).splitlines()
    assert [orjson.loads(x)["request_id"] for x in every] == [f"r{i}" for i in range(n)]


def test_stdlib_and_structlog_lines_keep_their_place_among_held_request_lines(tmp_path):
    """A fresh process: request lines held in the buffer, a structlog and a stdlib logging
    line in between, no explicit flush — every line is in the file, in order, at exit."""
    script = (
        "import asyncio, logging, structlog\n"
        "from llmroute.observe.logging import FLUSH_S, HOLD_BYTES, configure_logging, direct_lines\n"
        "async def main():\n"
        "    configure_logging('info', json=True)\n"
        "    lines = direct_lines()\n"
        "    for i in range(60):\n"
        "        lines.info('request', {'request_id': f'r{i}'})\n"
        "        if i == 30:\n"
        "            structlog.get_logger('x').warning('structlog_line')\n"
        "            logging.getLogger('std').warning('stdlib_line')\n"
        "asyncio.run(main())\n")
    err = tmp_path / "err"
    with err.open("wb") as f:
        subprocess.run([sys.executable, "-c", script], stderr=f, check=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    names = [x if not x.startswith("{") else orjson.loads(x).get("request_id",
                                                                  orjson.loads(x)["event"])
             for x in err.read_text().splitlines()]
    assert names == [*(f"r{i}" for i in range(31)), "structlog_line", "stdlib_line",
                     *(f"r{i}" for i in range(31, 60))]


async def test_a_served_request_line_held_is_written_when_the_observer_closes(restored,
                                                                             capfd):
    configure_logging("info", json=True)
    await serve_one("h1", "hi", close=True)
    lines = [orjson.loads(x) for x in capfd.readouterr().err.splitlines()
             if '"event":"request"' in x]
    assert [x["request_id"] for x in lines] == ["h1"]
