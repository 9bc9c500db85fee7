"""llmroute.local.engines: specs, command lines, ports, and process lifecycle on a fake server.

The fake ``llama-server`` is a small Python script that honours ``--port`` and serves
``/health``; ``--fake-mode`` (passed through ``extra_args``) makes it misbehave.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import aiohttp
import pytest

from fakes.procs import alive as _alive
from llmroute.errors import EngineError
from llmroute.local.engines import (
    LEAN_FLAGS,
    EngineFleet,
    EngineSpec,
    LocalEngine,
    child_env,
    current_run,
    engine_command,
    free_port,
)

FAKE_SERVER = textwrap.dedent("""\
    import http.server, signal, sys, time
    args = sys.argv[1:]
    def arg(name, default=None):
        return args[len(args) - 1 - args[::-1].index(name) + 1] if name in args else default
    mode = arg("--fake-mode", "ok")
    print("fake llama-server", " ".join(args), flush=True)
    if mode == "exit":
        print("error: cannot load the model", flush=True)
        sys.exit(3)
    if mode == "hang":
        time.sleep(3600)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(arg("--port"))), Health).serve_forever()
""")


@pytest.fixture
def fake_binary(tmp_path: Path) -> Path:
    path = tmp_path / "llama-server"
    path.write_text(f"#!{sys.executable}\n{FAKE_SERVER}")
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_model(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    return path


def _engine(fake_binary: Path, fake_model: Path, tmp_path: Path, mode: str = "ok",
            engine_id: str = "e1") -> LocalEngine:
    spec = EngineSpec(engine_id, ctx_size=512, extra_args=("--fake-mode", mode))
    return LocalEngine(spec, fake_binary, fake_model, tmp_path / "logs")


def test_spec_defaults_and_context_per_slot() -> None:
    spec = EngineSpec("a", ctx_size=2048, slots=2)
    assert spec.context_per_slot == 1024
    assert (spec.threads, spec.alias, spec.extra_args) == (1, "smollm2-135m-instruct", ())
    assert EngineSpec("b", ctx_size=1000, slots=3).context_per_slot == 333


def test_spec_extra_args_become_a_tuple_and_hashable() -> None:
    spec = EngineSpec("a", ctx_size=512, extra_args=["--foo", "1"])  # type: ignore[arg-type]
    assert spec.extra_args == ("--foo", "1")
    assert hash(spec) == hash(EngineSpec("a", ctx_size=512, extra_args=("--foo", "1")))


@pytest.mark.parametrize("kwargs", [
    {"id": "", "ctx_size": 512}, {"id": "../x", "ctx_size": 512},
    {"id": "a", "ctx_size": 512, "slots": 0}, {"id": "a", "ctx_size": 512, "threads": 0},
    {"id": "a", "ctx_size": 1, "slots": 2},
], ids=["empty-id", "path-id", "zero-slots", "zero-threads", "ctx-below-slots"])
def test_spec_rejects(kwargs: dict[str, object]) -> None:
    with pytest.raises(EngineError):
        EngineSpec(**kwargs)  # type: ignore[arg-type]


def test_engine_command() -> None:
    spec = EngineSpec("a", ctx_size=2048, slots=2, threads=3, alias="tiny",
                      extra_args=("--seed", "7"))
    argv = engine_command(spec, Path("/bin/llama-server"), Path("/m.gguf"), 8123)
    assert argv[0] == "/bin/llama-server"

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert (value("-m"), value("--host"), value("--port")) == ("/m.gguf", "127.0.0.1", "8123")
    assert (value("-c"), value("-np"), value("-t"), value("-tb")) == ("2048", "2", "3", "3")
    assert value("--alias") == "tiny"
    assert "--metrics" in argv and "--slots" in argv and "--no-webui" in argv
    assert argv[-2:] == ["--seed", "7"], "extra args come last, so they win"
    start = argv.index(LEAN_FLAGS[0])
    assert tuple(argv[start:start + len(LEAN_FLAGS)]) == LEAN_FLAGS


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_child_env_drops_llama_arg_overrides() -> None:
    env = child_env({"PATH": "/bin", "LLAMA_ARG_CTX_SIZE": "9", "HOME": "/root"})
    assert env == {"PATH": "/bin", "HOME": "/root"}


def test_current_run_keeps_only_the_latest_start() -> None:
    text = ("--- llmroute: starting a\ncouldn't bind\n"
            "--- llmroute: starting b\nloading\n")
    assert current_run(text) == "--- llmroute: starting b\nloading\n"
    assert current_run("no marker\n") == "no marker\n"


def test_properties_before_start(fake_binary: Path, fake_model: Path, tmp_path: Path) -> None:
    engine = _engine(fake_binary, fake_model, tmp_path)
    assert engine.pid is None and engine.returncode is None
    with pytest.raises(EngineError, match="not been started"):
        _ = engine.base_url


async def test_start_health_stop(fake_binary: Path, fake_model: Path, tmp_path: Path) -> None:
    engine = _engine(fake_binary, fake_model, tmp_path)
    await engine.start(timeout_s=30)
    try:
        assert engine.base_url == f"http://127.0.0.1:{engine.port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{engine.base_url}/health") as resp:
                assert resp.status == 200
        assert engine.returncode is None and engine.pid
        with pytest.raises(EngineError, match="already running"):
            await engine.start()
    finally:
        await engine.stop()
    assert engine.returncode == -signal.SIGTERM
    await engine.stop()  # idempotent
    assert "fake llama-server" in engine.log_path.read_text()


async def test_stop_before_start_is_a_no_op(fake_binary: Path, fake_model: Path,
                                            tmp_path: Path) -> None:
    await _engine(fake_binary, fake_model, tmp_path).stop()


async def test_stop_after_the_process_died(fake_binary: Path, fake_model: Path,
                                           tmp_path: Path) -> None:
    engine = _engine(fake_binary, fake_model, tmp_path)
    await engine.start(timeout_s=30)
    assert engine.pid is not None
    os.kill(engine.pid, signal.SIGKILL)
    await engine.stop()
    assert engine.returncode == -signal.SIGKILL


async def test_stop_escalates_to_sigkill(fake_binary: Path, fake_model: Path,
                                         tmp_path: Path) -> None:
    engine = _engine(fake_binary, fake_model, tmp_path, mode="stubborn")
    await engine.start(timeout_s=30)
    await engine.stop(grace_s=0.3)
    assert engine.returncode == -signal.SIGKILL


async def test_exit_during_startup_raises_with_log_tail(fake_binary: Path, fake_model: Path,
                                                        tmp_path: Path) -> None:
    engine = _engine(fake_binary, fake_model, tmp_path, mode="exit")
    with pytest.raises(EngineError) as caught:
        await engine.start(timeout_s=30)
    assert "exited with status 3" in caught.value.message
    assert "cannot load the model" in caught.value.message


async def test_health_timeout_stops_the_process(fake_binary: Path, fake_model: Path,
                                                tmp_path: Path) -> None:
    engine = _engine(fake_binary, fake_model, tmp_path, mode="hang")
    with pytest.raises(EngineError, match="not healthy after 0.5 s"):
        await engine.start(timeout_s=0.5)
    assert engine.returncode is not None


async def test_missing_binary(fake_model: Path, tmp_path: Path) -> None:
    engine = LocalEngine(EngineSpec("x", ctx_size=512), tmp_path / "absent", fake_model, tmp_path)
    with pytest.raises(EngineError, match="cannot run"):
        await engine.start()


async def test_cancelled_start_stops_the_process(fake_binary: Path, fake_model: Path,
                                                 tmp_path: Path) -> None:
    engine = _engine(fake_binary, fake_model, tmp_path, mode="hang")
    task = asyncio.create_task(engine.start(timeout_s=30))
    while engine.pid is None:
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.returncode is not None


async def test_fleet_starts_and_stops_all(fake_binary: Path, fake_model: Path,
                                          tmp_path: Path) -> None:
    specs = [EngineSpec(f"e{i}", ctx_size=512) for i in range(3)]
    calls: list[tuple[float, str]] = []
    fleet = EngineFleet(specs, fake_binary, fake_model, tmp_path / "logs",
                        progress=lambda f, m: calls.append((f, m)), timeout_s=30)
    async with fleet:
        engines = fleet.engines
        assert list(engines) == ["e0", "e1", "e2"]
        assert len({e.port for e in engines.values()}) == 3
        assert all(e.returncode is None for e in engines.values())
    assert all(e.returncode is not None for e in engines.values())
    assert [f for f, _ in calls] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])


async def test_fleet_failure_stops_the_others(fake_binary: Path, fake_model: Path,
                                              tmp_path: Path) -> None:
    specs = [EngineSpec("good", ctx_size=512),
             EngineSpec("bad", ctx_size=512, extra_args=("--fake-mode", "exit"))]
    fleet = EngineFleet(specs, fake_binary, fake_model, tmp_path / "logs", timeout_s=30)
    with pytest.raises(EngineError, match="bad exited"):
        async with fleet:
            pytest.fail("must not enter")
    assert all(e.returncode is not None for e in fleet.engines.values())


async def test_fleet_failure_does_not_wait_for_slow_starters(fake_binary: Path, fake_model: Path,
                                                            tmp_path: Path) -> None:
    specs = [EngineSpec("slow", ctx_size=512, extra_args=("--fake-mode", "hang")),
             EngineSpec("bad", ctx_size=512, extra_args=("--fake-mode", "exit"))]
    fleet = EngineFleet(specs, fake_binary, fake_model, tmp_path / "logs", timeout_s=60)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(EngineError, match="bad exited"):
        async with fleet:
            pytest.fail("must not enter")
    assert loop.time() - started < 20
    assert all(e.returncode is not None for e in fleet.engines.values())


async def test_fleet_cancelled_while_running_stops_all(fake_binary: Path, fake_model: Path,
                                                       tmp_path: Path) -> None:
    fleet = EngineFleet([EngineSpec("a", ctx_size=512), EngineSpec("b", ctx_size=512)],
                        fake_binary, fake_model, tmp_path / "logs", timeout_s=30)
    entered = asyncio.Event()

    async def serve() -> None:
        async with fleet:
            entered.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(serve())
    await asyncio.wait_for(entered.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(e.returncode is not None for e in fleet.engines.values())


def test_fleet_rejects_duplicate_ids(fake_binary: Path, fake_model: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="duplicate"):
        EngineFleet([EngineSpec("a", ctx_size=512)] * 2, fake_binary, fake_model, tmp_path)


PARENT = textwrap.dedent("""\
    import asyncio, sys
    from pathlib import Path
    from llmroute.local.engines import EngineSpec, LocalEngine
    async def main():
        engine = LocalEngine(EngineSpec("orphan", ctx_size=512), Path(sys.argv[1]),
                             Path(sys.argv[2]), Path(sys.argv[3]))
        await engine.start(timeout_s=30)
        print(engine.pid, flush=True)
        await asyncio.sleep(3600)
    asyncio.run(main())
""")


async def test_engine_dies_with_its_parent(fake_binary: Path, fake_model: Path,
                                           tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(fake_binary), str(fake_model),
                               str(tmp_path / "logs")], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(parent.stdout.readline), 30)
        child = int(line)
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
    for _ in range(100):
        if not _alive(child):
            break
        await asyncio.sleep(0.05)
    assert not _alive(child), "PR_SET_PDEATHSIG must take the engine down with its parent"
