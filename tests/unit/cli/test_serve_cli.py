"""``llmroute serve`` refuses bad input in one line: an unknown ``--log-level``, and a busy
port found before any engine starts or the gate fits; the claimed socket is then served."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from llmroute.api.server import _Server, bind_socket
from llmroute.assemble import serve as serve_module
from llmroute.cli.main import main
from llmroute.config import parse_config
from llmroute.errors import ConfigError
from tests.fakes.fleet import Replica

CONFIG = """\
pools: {general: {}}
backends: [{id: a, pool: general, engine: openai, model: m, base_url: "http://127.0.0.1:9"}]
routing: {default_pool: general}
"""
SRC = Path(__file__).resolve().parents[3] / "src"


@contextlib.contextmanager
def busy_port():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("value", ["loud", "warn", "", "trace"], ids=["loud", "warn", "empty",
                                                                      "trace"])
def test_unknown_log_level_is_one_line_and_exit_2(value, capsys):
    assert main(["serve", "--log-level", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("llmroute: --log-level: unknown level")
    assert "critical, error, warning, info, debug" in err


def test_busy_port_is_one_line_exit_2_within_seconds(tmp_path):
    config = tmp_path / "router.yaml"
    config.write_text(CONFIG)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with busy_port() as port:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "llmroute.cli.main", "serve", "--config", str(config),
             "--port", str(port), "--log-level", "ERROR"],
            capture_output=True, text=True, env=env, timeout=60)
        took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"cannot listen on 127.0.0.1:{port}: address already in use" in done.stderr
    assert took < 10  # the gate fit alone takes longer: it was never started


async def test_serve_forever_checks_the_port_before_opening_the_runtime(monkeypatch):
    opened = []

    def spy(*args, **kwargs):
        opened.append(args)
        raise AssertionError("the runtime must not open")

    monkeypatch.setattr(serve_module, "open_runtime", spy)
    with busy_port() as port, pytest.raises(ConfigError, match="address already in use"):
        await serve_module.serve_forever(parse_config(CONFIG, "t"), "127.0.0.1", port, None)
    assert opened == []


def test_bind_socket_claims_the_port_and_refuses_clients_until_served():
    with bind_socket("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        with socket.socket() as other, pytest.raises(OSError, match="in use"):
            other.bind(("127.0.0.1", port))  # a plain bind (no SO_REUSEADDR) is refused
        with pytest.raises(ConnectionRefusedError), socket.create_connection(
                ("127.0.0.1", port), timeout=2):
            pass
    with pytest.raises(ConfigError, match="cannot listen on no-such-host.invalid:80"):
        bind_socket("no-such-host.invalid", 80)


async def test_the_claimed_socket_is_served_and_announced(capfd):
    app = Starlette(routes=[Route("/health", lambda r: PlainTextResponse("ok"))])
    with bind_socket("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="info",
                                        lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            assert not task.done()
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{port}/health")
        server.should_exit = True
        await task
    assert r.text == "ok"
    assert f"Uvicorn running on http://127.0.0.1:{port}" in capfd.readouterr().err


def test_a_copied_config_without_its_strategies_folder_exits_2_before_any_engine_starts(
        tmp_path, monkeypatch, capsys):
    def spy(*args, **kwargs):
        raise AssertionError("the runtime must not open")

    monkeypatch.setattr(serve_module, "open_runtime", spy)
    config = tmp_path / "router.yaml"
    config.write_text(CONFIG + "strategies: {dir: strategies}\n")
    code = main(["serve", "--config", str(config), "--port", "0", "--log-level", "error"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{tmp_path / 'strategies'}: cannot read the strategies directory" in err



@pytest.mark.slow
def test_the_config_s_header_bound_reaches_the_served_protocol(tmp_path):
    """``server.max_header_bytes: 2048`` in the config: ``llmroute serve`` refuses 3 kB of
    headers with a 431 naming 2048 bytes, and serves 1 kB."""
    config = tmp_path / "router.yaml"
    config.write_text("server: {max_header_bytes: 2048, drain_delay_s: 0}\n"
                      "gate: {kind: off}\n" + CONFIG)
    with bind_socket("127.0.0.1", 0) as probe:
        port = probe.getsockname()[1]
    replica = Replica(config, port)
    try:
        replica.wait_ready()
        big = httpx.get(replica.url + "/health", headers={"x-pad": "p" * 3000}, timeout=5)
        small = httpx.get(replica.url + "/health", headers={"x-pad": "p" * 1000}, timeout=5)
    finally:
        replica.stop()
    assert big.status_code == 431
    assert big.json()["error"]["code"] == "headers_too_large"
    assert "over 2048 bytes" in big.json()["error"]["message"]
    assert small.status_code == 200
