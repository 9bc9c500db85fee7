"""Build llama.cpp's C++ ``llama-server`` once per machine and cache the binary.

The sources are the llama.cpp tree vendored in the ``llama-cpp-python`` sdist on PyPI (version
``$LLAMA_CPP_PYTHON_VERSION``, default 0.3.36). Layout under the cache directory
(``$LLMROUTE_CACHE``, default ``~/.cache/llmroute``)::

    llama-server-V/bin/llama-server   the cached binary (the only thing kept)
    build-V/                          sdist, extracted sources, cmake build tree (removed after)
    build-V.log                       the log of the latest build attempt
    build-V.lock                      flock(2): at most one build per machine at a time

``$LLMROUTE_LLAMA_SERVER`` names an explicit binary and skips all of this. A fresh 2-core
machine takes ~15 minutes; later calls return at once.

``python -m llmroute.local.build`` prints the binary's path on stdout and progress on stderr
(``scripts/build-llama-server.sh`` is a thin wrapper around it).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import platform
import re
import shlex
import shutil
import signal
import sys
import tarfile
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from llmroute.errors import EngineError

ProgressFn = Callable[[float, str], None]
"""``progress(fraction, message)``: fraction of the whole job done, 0.0–1.0."""

DEFAULT_VERSION = "0.3.36"
ENV_BINARY = "LLMROUTE_LLAMA_SERVER"
ENV_CACHE = "LLMROUTE_CACHE"
ENV_VERSION = "LLAMA_CPP_PYTHON_VERSION"
LOG_TAIL_LINES = 40

# Where each phase starts, as a fraction of the whole job; compiling fills the rest.
_DOWNLOAD, _EXTRACT, _CONFIGURE, _COMPILE = 0.0, 0.02, 0.04, 0.08
_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]\s*(.*?)\s*$")
_CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
    "-DGGML_NATIVE=ON",
)
# GCC 12's _tile_loadconfig() declares that it reads 8 bytes, not the 64-byte tile config, so
# the config's row/column stores are optimised away and ggml's AMX kernels die with SIGILL
# (seen on a Sapphire Rapids VM). AMX only speeds up prompt batches; keep it off on x86.
_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
_X86 = ("x86_64", "amd64", "i386", "i686")


@dataclass(frozen=True)
class BuildPaths:
    """Where one llama-cpp-python ``version`` is built and cached under ``cache``."""

    cache: Path
    version: str

    @property
    def binary(self) -> Path:
        return self.cache / f"llama-server-{self.version}" / "bin" / "llama-server"

    @property
    def work(self) -> Path:
        return self.cache / f"build-{self.version}"

    @property
    def src(self) -> Path:
        return self.work / "src"

    @property
    def build(self) -> Path:
        return self.work / "build"

    @property
    def log(self) -> Path:
        return self.cache / f"build-{self.version}.log"

    @property
    def lock(self) -> Path:
        return self.cache / f"build-{self.version}.lock"


def build_paths(env: Mapping[str, str] = os.environ) -> BuildPaths:
    """The build layout chosen by ``$LLMROUTE_CACHE`` and ``$LLAMA_CPP_PYTHON_VERSION``."""
    cache = Path(env.get(ENV_CACHE) or "~/.cache/llmroute").expanduser()
    return BuildPaths(cache=cache, version=env.get(ENV_VERSION) or DEFAULT_VERSION)


def parse_progress(line: str) -> tuple[float, str] | None:
    """Parse a cmake/make progress line ``[ 42%] Building …`` into ``(0.42, "Building …")``.

    Returns None for any other line (warnings, compiler output).
    """
    match = _PERCENT.match(line)
    if match is None:
        return None
    return min(int(match.group(1)), 100) / 100.0, match.group(2)


def overall_fraction(compile_fraction: float) -> float:
    """Map cmake's own 0–1 progress onto the whole job (download and configure come first)."""
    return _COMPILE + (1.0 - _COMPILE) * compile_fraction


def download_command(paths: BuildPaths) -> list[str]:
    """``pip download`` of the llama-cpp-python sdist (never a wheel) into the work dir."""
    return [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--no-binary", ":all:", f"llama-cpp-python=={paths.version}", "-d", str(paths.work)]


def configure_command(paths: BuildPaths, machine: str | None = None) -> list[str]:
    """``cmake`` configure: static Release build of the server only, tuned for this CPU
    (``machine``, default ``platform.machine()``; on x86 without AMX, see ``_NO_AMX``)."""
    argv = ["cmake", "-S", str(paths.src), "-B", str(paths.build), *_CMAKE_OPTIONS]
    if (machine or platform.machine()).lower() in _X86:
        argv += [f"-DCMAKE_C_FLAGS={_NO_AMX}", f"-DCMAKE_CXX_FLAGS={_NO_AMX}"]
    return argv


def compile_command(paths: BuildPaths, jobs: int) -> list[str]:
    """``cmake --build`` of the ``llama-server`` target with ``jobs`` parallel jobs."""
    return ["cmake", "--build", str(paths.build), "--target", "llama-server", "-j", str(jobs)]


async def ensure_llama_server(progress: ProgressFn | None = None) -> Path:
    """Return the path of a runnable ``llama-server``, building and caching it if needed.

    ``progress(fraction 0–1, message)`` is called during a build (never for a cache hit).
    Concurrent callers, in this or other processes, wait for one build.

    Raises:
        EngineError: ``$LLMROUTE_LLAMA_SERVER`` is not an executable file, or a build step
            failed (the message ends with the tail of the build log).
    """
    explicit = os.environ.get(ENV_BINARY)
    if explicit:
        return _explicit_binary(explicit)
    paths = build_paths()
    if _is_executable(paths.binary):
        return paths.binary
    report = progress or _ignore
    await asyncio.to_thread(paths.cache.mkdir, parents=True, exist_ok=True)
    async with build_lock(paths.lock, report):
        if not _is_executable(paths.binary):
            await _build(paths, report)
    return paths.binary


@contextlib.asynccontextmanager
async def build_lock(path: Path, progress: ProgressFn | None = None) -> AsyncIterator[None]:
    """Hold an exclusive flock(2) on ``path`` (created if absent) for the ``async with`` body.

    The blocking wait runs in a worker thread; if the waiter is cancelled, the lock file is
    closed as soon as that thread returns, so no lock leaks.

    Raises:
        EngineError: the lock file cannot be opened or locked.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise EngineError(f"cannot open the build lock {path}: {err}") from err
    await _acquire(fd, path, progress or _ignore)
    try:
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


async def _acquire(fd: int, path: Path, progress: ProgressFn) -> None:
    """Lock ``fd`` exclusively; on any failure ``fd`` is closed (now or once the thread returns)."""
    with contextlib.suppress(BlockingIOError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    progress(0.0, f"waiting for another build to finish (lock {path})")
    locking = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
    try:
        await asyncio.shield(locking)
    except asyncio.CancelledError:
        # The thread cannot be interrupted: close fd only once it has returned.
        locking.add_done_callback(lambda _: os.close(fd))
        raise
    except OSError as err:
        os.close(fd)
        raise EngineError(f"cannot lock {path}: {err}") from err


async def _build(paths: BuildPaths, progress: ProgressFn) -> None:
    with paths.log.open("wb") as log:
        try:
            await _fetch_sources(paths, log, progress)
            progress(_CONFIGURE, "configuring llama.cpp with cmake")
            await run_logged(configure_command(paths), log)
            progress(_COMPILE, "compiling llama-server")
            await run_logged(compile_command(paths, _jobs()), log,
                             on_line=lambda line: _report_compile(line, progress))
        except EngineError as err:
            log.flush()
            raise EngineError(f"building llama-server failed: {err.message}\n"
                              f"--- last lines of {paths.log} ---\n{log_tail(paths.log)}") from err
    try:
        await asyncio.to_thread(_install, paths)
    except OSError as err:
        raise EngineError(f"cannot install llama-server into {paths.binary}: {err}") from err
    progress(1.0, f"built {paths.binary}")


async def _fetch_sources(paths: BuildPaths, log: BinaryIO, progress: ProgressFn) -> None:
    if await asyncio.to_thread(paths.src.is_dir):
        return
    await asyncio.to_thread(paths.work.mkdir, parents=True, exist_ok=True)
    if _find_sdist(paths) is None:
        progress(_DOWNLOAD, f"downloading the llama-cpp-python=={paths.version} sdist")
        await run_logged(download_command(paths), log)
    progress(_EXTRACT, "extracting the vendored llama.cpp sources")
    try:
        await asyncio.to_thread(_extract, paths)
    except (OSError, tarfile.TarError, StopIteration) as err:
        await asyncio.to_thread(_discard_sdist, paths)  # maybe truncated: fetch it afresh next time
        raise EngineError(f"cannot extract the llama.cpp sources: {err!r}") from err


async def run_logged(argv: list[str], log: BinaryIO,
                     on_line: Callable[[str], None] | None = None) -> None:
    """Run ``argv`` (own session, stdin from /dev/null) with its output appended to ``log``.

    ``on_line`` gets each output line, decoded and stripped. On cancellation the whole process
    group is killed.

    Raises:
        EngineError: the program cannot be started or exits with a non-zero status.
    """
    log.write(f"$ {shlex.join(argv)}\n".encode())
    log.flush()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True, limit=1 << 20)
    except OSError as err:
        raise EngineError(f"cannot run {argv[0]}: {err}") from err
    try:
        await _pump(proc, log, on_line)
        status = await proc.wait()
    except BaseException:
        _kill_group(proc.pid)
        await proc.wait()
        raise
    if status != 0:
        raise EngineError(f"`{shlex.join(argv)}` exited with status {status}")


async def _pump(proc: asyncio.subprocess.Process, log: BinaryIO,
                on_line: Callable[[str], None] | None) -> None:
    assert proc.stdout is not None
    async for raw in proc.stdout:
        log.write(raw)
        if on_line is not None:
            on_line(raw.decode(errors="replace").rstrip())
    log.flush()


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file (at most the last 64 KiB); "" if unreadable."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def _report_compile(line: str, progress: ProgressFn) -> None:
    parsed = parse_progress(line)
    if parsed is not None:
        progress(overall_fraction(parsed[0]), parsed[1])


def _find_sdist(paths: BuildPaths) -> Path | None:
    found = sorted(paths.work.glob(f"*-{paths.version}.tar.gz"))
    return found[0] if found else None


def _extract(paths: BuildPaths) -> None:
    sdist = _find_sdist(paths)
    if sdist is None:
        raise FileNotFoundError(f"no llama-cpp-python sdist in {paths.work}")
    tmp = paths.work / "extract"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp, filter="data")
        else:  # Python < 3.11.4
            tar.extractall(tmp)
    next(tmp.glob("*/vendor/llama.cpp")).rename(paths.src)
    shutil.rmtree(tmp)


def _discard_sdist(paths: BuildPaths) -> None:
    sdist = _find_sdist(paths)
    if sdist is not None:
        sdist.unlink(missing_ok=True)


def _install(paths: BuildPaths) -> None:
    paths.binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.binary.with_name(paths.binary.name + ".tmp")
    shutil.copy2(paths.build / "bin" / "llama-server", tmp)
    os.replace(tmp, paths.binary)
    shutil.rmtree(paths.work, ignore_errors=True)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _explicit_binary(value: str) -> Path:
    path = Path(value).expanduser()
    if not _is_executable(path):
        raise EngineError(f"${ENV_BINARY}={value} is not an executable file")
    return path


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _jobs() -> int:
    return len(os.sched_getaffinity(0)) or 1


def _ignore(fraction: float, message: str) -> None:
    """A progress callback that does nothing."""


def _print_progress(fraction: float, message: str) -> None:
    print(f"[{fraction * 100:5.1f}%] {message}", file=sys.stderr, flush=True)


def main() -> int:
    """``python -m llmroute.local.build``: print the binary's path; progress goes to stderr.

    Returns the exit status: 0 on success, 1 when the build fails (reason on stderr).
    """
    try:
        path = asyncio.run(ensure_llama_server(_print_progress))
    except EngineError as err:
        print(f"llmroute: {err.message}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
