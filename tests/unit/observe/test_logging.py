"""The JSON log chain's direct request line: the bytes structlog's chain writes for
``log.info(event, **fields)``, used only while that chain (and its level) is in effect."""

from __future__ import annotations

import datetime
import logging
import re

import orjson
import pytest
import structlog
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from structlog.testing import capture_logs

from llmroute.observe.logging import configure_logging, direct_lines

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


async def test_a_served_request_writes_one_json_line_directly(restored, capsysbinary):
    configure_logging("info", json=True)
    async with serve_upstream(["ok"]) as up, \
            open_router(make_config([{"id": "a", "pool": "general",
                                      "base_url": up.base_url}])) as (_, client):
        await client.post("/v1/chat/completions", headers={"x-request-id": "j1"}, json={
            "model": "auto", "messages": [{"role": "user", "content": "secret words"}]})
    lines = [orjson.loads(x) for x in capsysbinary.readouterr().err.splitlines()
             if b'"event":"request"' in x]
    assert len(lines) == 1
    line = lines[0]
    assert line["request_id"] == "j1" and line["backend"] == "a" and line["status"] == 200
    assert line["level"] == "info" and list(line)[-3:] == ["event", "level", "timestamp"]
    assert "secret" not in str(line)
