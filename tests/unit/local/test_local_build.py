"""llmroute.local.build: progress parsing, commands, cache/env handling, the lock, a fake build."""

from __future__ import annotations

import asyncio
import io
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fakes.procs import alive as _alive
from llmroute.errors import EngineError
from llmroute.local import build
from llmroute.local.build import (
    BuildPaths,
    build_lock,
    build_paths,
    ensure_llama_server,
    overall_fraction,
    parse_progress,
    run_logged,
)

VERSION = build.DEFAULT_VERSION


@pytest.mark.parametrize(("line", "expected"), [
    ("[ 42%] Building CXX object src/llama.cpp.o", (0.42, "Building CXX object src/llama.cpp.o")),
    ("[  0%] Generating build details", (0.0, "Generating build details")),
    ("[100%] Built target llama-server", (1.0, "Built target llama-server")),
    ("[  7%] Linking C static library libggml.a  ", (0.07, "Linking C static library libggml.a")),
    ("[ 50%]", (0.5, "")),
    ("-- Configuring done", None),
    ("warning: [ 42%] inside a line", None),
    ("[42] Building", None),
    ("", None),
], ids=["mid", "zero", "done", "trailing-space", "no-message", "cmake-status", "not-at-start",
        "no-percent-sign", "empty"])
def test_parse_progress(line: str, expected: tuple[float, str] | None) -> None:
    assert parse_progress(line) == expected


def test_overall_fraction_spans_compile_phase() -> None:
    assert 0.0 < overall_fraction(0.0) < overall_fraction(0.5) < overall_fraction(1.0) == 1.0


def test_build_paths_from_env(tmp_path: Path) -> None:
    paths = build_paths({"LLMROUTE_CACHE": str(tmp_path), "LLAMA_CPP_PYTHON_VERSION": "9.9.9"})
    assert paths.binary == tmp_path / "llama-server-9.9.9" / "bin" / "llama-server"
    assert paths.work == tmp_path / "build-9.9.9"
    assert paths.log.parent == paths.lock.parent == tmp_path


def test_build_paths_default() -> None:
    paths = build_paths({})
    assert paths.cache == Path("~/.cache/llmroute").expanduser()
    assert paths.version == VERSION


def test_commands(tmp_path: Path) -> None:
    paths = BuildPaths(tmp_path, VERSION)
    download = build.download_command(paths)
    assert download[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in download and ":all:" in download
    assert f"llama-cpp-python=={VERSION}" in download
    configure = build.configure_command(paths)
    assert configure[:5] == ["cmake", "-S", str(paths.src), "-B", str(paths.build)]
    assert "-DLLAMA_BUILD_SERVER=ON" in configure and "-DBUILD_SHARED_LIBS=OFF" in configure
    assert build.compile_command(paths, 3)[-4:] == ["--target", "llama-server", "-j", "3"]


@pytest.mark.parametrize(("machine", "no_amx"), [("x86_64", True), ("AMD64", True),
                                                  ("aarch64", False), ("arm64", False)],
                         ids=["x86_64", "amd64", "aarch64", "arm64"])
def test_configure_turns_amx_off_on_x86(tmp_path: Path, machine: str, no_amx: bool) -> None:
    argv = build.configure_command(BuildPaths(tmp_path, VERSION), machine)
    flags = [a for a in argv if a.startswith(("-DCMAKE_C_FLAGS=", "-DCMAKE_CXX_FLAGS="))]
    assert len(flags) == (2 if no_amx else 0)
    assert all("-mno-amx-tile" in f for f in flags)


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


async def test_explicit_binary_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = _executable(tmp_path / "my-llama-server")
    monkeypatch.setenv("LLMROUTE_LLAMA_SERVER", str(binary))
    assert await ensure_llama_server() == binary


async def test_explicit_binary_env_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMROUTE_LLAMA_SERVER", str(tmp_path / "nope"))
    with pytest.raises(EngineError, match="LLMROUTE_LLAMA_SERVER"):
        await ensure_llama_server()


async def test_cached_binary_is_returned_without_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMROUTE_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("LLMROUTE_CACHE", str(tmp_path))
    binary = _executable(BuildPaths(tmp_path, VERSION).binary)
    calls: list[tuple[float, str]] = []
    assert await ensure_llama_server(lambda f, m: calls.append((f, m))) == binary
    assert calls == []


async def test_build_lock_excludes_a_second_holder(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    order: list[str] = []
    waits: list[str] = []

    async def second() -> None:
        async with build_lock(lock, lambda f, m: waits.append(m)):
            order.append("second")

    async with build_lock(lock):
        task = asyncio.create_task(second())
        await asyncio.sleep(0.2)
        assert not task.done()
        order.append("first")
    await asyncio.wait_for(task, 5)
    assert order == ["first", "second"]
    assert waits and "waiting" in waits[0]


async def test_build_lock_cancelled_waiter_does_not_leak(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"

    async def waiter() -> None:
        async with build_lock(lock):
            pytest.fail("must not get the lock")

    async with build_lock(lock):
        task = asyncio.create_task(waiter())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await asyncio.sleep(0.2)  # the abandoned thread gets the lock, then its fd is closed
    async with asyncio.timeout(5):
        async with build_lock(lock):
            pass


async def test_run_logged_reports_lines_and_fails_with_status(tmp_path: Path) -> None:
    lines: list[str] = []
    with (tmp_path / "log").open("wb") as log:
        await run_logged(["sh", "-c", "echo '[ 10%] a'; echo b"], log, lines.append)
        with pytest.raises(EngineError, match="status 3"):
            await run_logged(["sh", "-c", "exit 3"], log)
        with pytest.raises(EngineError, match="cannot run"):
            await run_logged([str(tmp_path / "no-such-program")], log)
    assert lines == ["[ 10%] a", "b"]
    assert b"$ sh -c" in (tmp_path / "log").read_bytes()


async def test_run_logged_cancel_kills_the_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    with (tmp_path / "log").open("wb") as log:
        task = asyncio.create_task(run_logged(["sh", "-c", script], log))
        while not pid_file.exists() or not pid_file.read_text().strip():
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    grandchild = int(pid_file.read_text())
    await asyncio.sleep(0.2)
    assert not _alive(grandchild)


FAKE_CMAKE = """#!/bin/sh
# A stand-in for cmake: configure succeeds; --build prints progress and "links" the binary.
if [ "$1" = "--build" ]; then
  [ -n "$FAKE_CMAKE_FAIL" ] && { echo "error: the compiler broke"; exit 2; }
  echo "[ 10%] Building C object ggml.c.o"
  echo "warning: something"
  echo "[100%] Built target llama-server"
  mkdir -p "$2/bin" && printf '#!/bin/sh\\necho fake\\n' > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
else
  echo "-- Configuring done"
fi
"""


def _fake_sdist(work: Path) -> None:
    work.mkdir(parents=True)
    with tarfile.open(work / f"llama_cpp_python-{VERSION}.tar.gz", "w:gz") as tar:
        data = b"project(llama.cpp)\n"
        info = tarfile.TarInfo(f"llama_cpp_python-{VERSION}/vendor/llama.cpp/CMakeLists.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def fake_toolchain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BuildPaths:
    _executable(tmp_path / "bin" / "cmake", FAKE_CMAKE)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("LLMROUTE_LLAMA_SERVER", raising=False)
    monkeypatch.delenv("LLAMA_CPP_PYTHON_VERSION", raising=False)
    monkeypatch.setenv("LLMROUTE_CACHE", str(tmp_path / "cache"))
    paths = BuildPaths(tmp_path / "cache", VERSION)
    _fake_sdist(paths.work)
    return paths


async def test_fake_build_end_to_end(fake_toolchain: BuildPaths) -> None:
    paths = fake_toolchain
    calls: list[tuple[float, str]] = []
    assert await ensure_llama_server(lambda f, m: calls.append((f, m))) == paths.binary
    assert os.access(paths.binary, os.X_OK)
    assert not paths.work.exists(), "the build tree is removed after installing"
    fractions = [f for f, _ in calls]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert (overall_fraction(0.1), "Building C object ggml.c.o") in calls
    assert "Configuring done" in paths.log.read_text()


async def test_fake_build_failure_carries_log_tail(
        fake_toolchain: BuildPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CMAKE_FAIL", "1")
    with pytest.raises(EngineError) as caught:
        await ensure_llama_server()
    assert "exited with status 2" in caught.value.message
    assert "the compiler broke" in caught.value.message
    assert not fake_toolchain.binary.exists()
    assert fake_toolchain.src.is_dir(), "sources are kept for the next attempt"


def test_module_main_prints_only_the_path(tmp_path: Path) -> None:
    binary = _executable(tmp_path / "llama-server")
    env = {**os.environ, "LLMROUTE_LLAMA_SERVER": str(binary)}
    done = subprocess.run([sys.executable, "-m", "llmroute.local.build"], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == f"{binary}\n"


def test_module_main_fails_with_status_1(tmp_path: Path) -> None:
    env = {**os.environ, "LLMROUTE_LLAMA_SERVER": str(tmp_path / "missing")}
    done = subprocess.run([sys.executable, "-m", "llmroute.local.build"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert "LLMROUTE_LLAMA_SERVER" in done.stderr
