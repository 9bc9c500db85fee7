"""Local llama.cpp engines: one ``llama-server`` child process each, on a loopback port.

``EngineSpec`` says what to start, ``LocalEngine`` starts (and health-checks) and stops one
process, ``EngineFleet`` starts several concurrently and stops them all together.

Every child runs in its own session (a Ctrl-C in the terminal reaches only the router, which
then stops its engines in order) and gets ``PR_SET_PDEATHSIG = SIGKILL``, so it also dies
when the router dies without stopping it. SIGKILL, not SIGTERM: the router was the engine's
only client, so there is nothing to drain, and llama-server's SIGTERM path can hang (its
handler starts a clean-up; a second signal calls ``exit()`` from inside the handler, which
can deadlock against that clean-up). Linux sends that signal when the *thread* that
started the child exits: start engines from the thread that runs the event loop for the
router's lifetime (the main thread under uvicorn and pytest).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import BinaryIO

import aiohttp

from llmroute.errors import EngineError
from llmroute.local.build import log_tail

DEFAULT_ALIAS = "smollm2-135m-instruct"
LOOPBACK = "127.0.0.1"

LEAN_FLAGS: tuple[str, ...] = (
    "--no-webui",          # no static UI bundle served
    "--no-kv-unified",     # each slot owns exactly ctx_size / slots tokens of KV cache
    "--fit", "off",        # no trial load to "fit" device memory; keep the given sizes
    "--cache-ram", "0",    # no host-RAM prompt cache on top of the slots' own KV cache
    "--seed", "0",         # a fixed default sampling seed (a request's "seed" still wins)
    "--log-colors", "off", "--log-prefix", "--log-timestamps",
)
"""Flags added to every engine: lean (memory, startup) and deterministic on a small CPU box.
``EngineSpec.extra_args`` come after them, so they can override any of these."""

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.1
_BIND_ATTEMPTS = 3
_BIND_FAILED = "couldn't bind"
_START_MARKER = "--- llmroute: starting"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

ProgressFn = Callable[[float, str], None]


@dataclass(frozen=True)
class EngineSpec:
    """What to start: one ``llama-server`` serving the model under ``alias``.

    ``ctx_size`` is the total KV cache in tokens, shared equally by ``slots`` parallel
    sequences (llama.cpp rounds each slot's share up to a multiple of 256 tokens).
    ``threads`` is used for both generation and prompt processing. ``extra_args`` are
    appended to the command line verbatim.

    Raises:
        EngineError: an id that is not a plain file name, or a non-positive size.
    """

    id: str
    ctx_size: int
    slots: int = 1
    threads: int = 1
    alias: str = DEFAULT_ALIAS
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_args", tuple(self.extra_args))
        if not _ID.fullmatch(self.id):
            raise EngineError(f"engine id {self.id!r} must match {_ID.pattern}")
        if self.slots < 1 or self.threads < 1:
            raise EngineError(f"engine {self.id}: slots and threads must be >= 1")
        if self.ctx_size < self.slots:
            raise EngineError(f"engine {self.id}: ctx_size {self.ctx_size} < slots {self.slots}")

    @property
    def context_per_slot(self) -> int:
        """Tokens of context each slot can hold (prompt + completion)."""
        return self.ctx_size // self.slots


def engine_command(spec: EngineSpec, binary: Path, model: Path, port: int) -> list[str]:
    """The ``llama-server`` command line for ``spec`` on ``127.0.0.1:port``."""
    threads = str(spec.threads)
    return [
        str(binary), "-m", str(model), "--host", LOOPBACK, "--port", str(port),
        "-c", str(spec.ctx_size), "-np", str(spec.slots), "-t", threads, "-tb", threads,
        "--alias", spec.alias, "--metrics", "--slots", *LEAN_FLAGS, *spec.extra_args,
    ]


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def child_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The engine's environment: ours without ``LLAMA_ARG_*``, which would override flags."""
    return {k: v for k, v in environ.items() if not k.startswith("LLAMA_ARG_")}


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get SIGKILL when its parent dies."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork, not in the child

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class _PortTaken(Exception):
    """The engine exited because its port was taken between our probe and its bind."""


class LocalEngine:
    """One ``llama-server`` child process; its output goes to ``log_dir/ID.log`` (appended)."""

    def __init__(self, spec: EngineSpec, binary: Path, model: Path, log_dir: Path):
        self.spec = spec
        self._binary = Path(binary)
        self._model = Path(model)
        self.log_path = Path(log_dir) / f"{spec.id}.log"
        self._proc: asyncio.subprocess.Process | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The loopback TCP port. Raises EngineError before ``start()``."""
        if self._port is None:
            raise EngineError(f"engine {self.spec.id} has not been started")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash). Raises EngineError before ``start()``."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The process id, or None before ``start()``."""
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        """None while running (or never started); else the exit status (-N: killed by signal N)."""
        return None if self._proc is None else self._proc.returncode

    async def start(self, timeout_s: float = 120.0) -> None:
        """Start the engine and wait until ``GET /health`` answers 200.

        Retries with a new port if another process took the chosen one first. On any failure
        or cancellation the process is stopped before this returns.

        Raises:
            EngineError: already running; the binary cannot be started; the process exited
                during startup or was not healthy within ``timeout_s`` seconds (the message
                ends with the tail of its log).
        """
        if self.returncode is None and self._proc is not None:
            raise EngineError(f"engine {self.spec.id} is already running (pid {self.pid})")
        deadline = asyncio.get_running_loop().time() + timeout_s
        for _ in range(_BIND_ATTEMPTS):
            await self._spawn(free_port())
            try:
                await self._wait_healthy(deadline, timeout_s)
                return
            except _PortTaken:
                continue
            except BaseException:
                await self.stop()
                raise
        raise EngineError(f"engine {self.spec.id}: no free port after {_BIND_ATTEMPTS} tries\n"
                          + await self._tail())

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop the process: SIGTERM, then SIGKILL after ``grace_s`` seconds. Idempotent;
        fine if it never started or has already exited. Cancelled: SIGKILL, then re-raise."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            _send(proc, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                _send(proc, signal.SIGKILL)
            except asyncio.CancelledError:
                _send(proc, signal.SIGKILL)
                raise
        await proc.wait()

    async def _spawn(self, port: int) -> None:
        argv = engine_command(self.spec, self._binary, self._model, port)
        log = await asyncio.to_thread(_open_log, self.log_path, argv)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                env=child_env(), start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
        except OSError as err:
            raise EngineError(f"engine {self.spec.id}: cannot run {self._binary}: {err}") from err
        finally:
            log.close()  # the child holds its own descriptor
        self._port = port

    async def _wait_healthy(self, deadline: float, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        url = f"{self.base_url}/health"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
            while not await _is_healthy(session, url):
                await self._raise_if_exited()
                if loop.time() >= deadline:
                    raise EngineError(f"engine {self.spec.id} not healthy after {timeout_s:g} s "
                                      f"at {url}\n" + await self._tail())
                await asyncio.sleep(_POLL_S)

    async def _raise_if_exited(self) -> None:
        if self.returncode is None:
            return
        tail = await self._tail()
        if _BIND_FAILED in tail:
            raise _PortTaken()
        raise EngineError(f"engine {self.spec.id} exited with status {self.returncode} "
                          f"during startup\n--- last lines of {self.log_path} ---\n{tail}")

    async def _tail(self) -> str:
        """The tail of this run's log (read in a worker thread)."""
        return current_run(await asyncio.to_thread(log_tail, self.log_path))


def current_run(log_text: str) -> str:
    """The part of an engine log written since its latest start marker (all of it if none)."""
    start = log_text.rfind(_START_MARKER)
    return log_text if start < 0 else log_text[start:]


def _open_log(path: Path, argv: list[str]) -> BinaryIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.open("ab")
    log.write(f"{_START_MARKER} {' '.join(argv)}\n".encode())
    log.flush()
    return log


async def _is_healthy(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


def _send(proc: asyncio.subprocess.Process, sig: int) -> None:
    """Signal a process we have not yet seen exit.

    Not ``proc.send_signal()``: ``subprocess.Popen.send_signal`` first calls ``poll()``, which
    can reap a dead child before asyncio's child watcher does, and the watcher then reports
    returncode 255 instead of the real status.
    """
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)


async def _all_or_nothing(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for all ``tasks``; on the first failure (or our cancellation) cancel the others,
    wait for them to unwind, and raise that failure."""
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()  # a no-op for finished tasks
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if task in done and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


class EngineFleet:
    """``async with EngineFleet(specs, binary, model, log_dir) as fleet:`` runs several engines.

    Entering starts them concurrently; if one fails, the others are stopped and its
    EngineError is raised. Leaving (also on error or cancellation) stops them all.
    ``progress(fraction 0–1, message)`` is called as engines become healthy.

    Raises:
        EngineError: duplicate engine ids (constructor); an engine failed to start (enter).
    """

    def __init__(self, specs: Iterable[EngineSpec], binary: Path, model: Path, log_dir: Path,
                 *, progress: ProgressFn | None = None, timeout_s: float = 120.0,
                 grace_s: float = 5.0):
        self._engines: dict[str, LocalEngine] = {}
        for spec in specs:
            if spec.id in self._engines:
                raise EngineError(f"duplicate engine id {spec.id!r}")
            self._engines[spec.id] = LocalEngine(spec, binary, model, log_dir)
        self._progress = progress
        self._timeout_s = timeout_s
        self._grace_s = grace_s
        self._ready = 0

    @property
    def engines(self) -> Mapping[str, LocalEngine]:
        """Engine id → LocalEngine, in the order the specs were given (read-only)."""
        return MappingProxyType(self._engines)

    async def __aenter__(self) -> EngineFleet:
        self._report(0.0, f"starting {len(self._engines)} llama-server engine(s)")
        try:
            await _all_or_nothing([asyncio.create_task(self._start(e))
                                   for e in self._engines.values()])
        except BaseException:
            await self._stop_all()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stop_all()

    async def _start(self, engine: LocalEngine) -> None:
        await engine.start(self._timeout_s)
        self._ready += 1
        self._report(self._ready / len(self._engines),
                     f"engine {engine.spec.id} ready at {engine.base_url}")

    async def _stop_all(self) -> None:
        stopping = asyncio.gather(*(e.stop(self._grace_s) for e in self._engines.values()))
        try:
            await asyncio.shield(stopping)
        except asyncio.CancelledError:
            await stopping  # finish stopping the children, then honour the cancellation
            raise

    def _report(self, fraction: float, message: str) -> None:
        if self._progress is not None:
            self._progress(fraction, message)
