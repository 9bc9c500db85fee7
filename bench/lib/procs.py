"""Process helpers for benchmarks: start a server pinned to CPU cores, wait until it answers,
read its CPU time and RSS (psutil), stop it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cores(wanted: set[int]) -> set[int]:
    """``wanted`` ∩ the CPUs this process may use (falls back to all of them)."""
    allowed = os.sched_getaffinity(0)
    return (wanted & allowed) or allowed


@dataclass
class Server:
    """A child process serving HTTP on ``port``; ``name`` for tables."""

    name: str
    proc: subprocess.Popen
    port: int
    peak_rss: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_s(self) -> float:
        """User + system CPU seconds of the process and all its children so far."""
        total = 0.0
        for p in self._tree():
            t = p.cpu_times()
            total += t.user + t.system
        return total

    def sample_rss(self) -> int:
        """Current RSS of the process tree in bytes; also updates ``peak_rss``."""
        rss = sum(p.memory_info().rss for p in self._tree())
        self.peak_rss = max(self.peak_rss, rss)
        return rss

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def suspend(self) -> None:
        """SIGSTOP the process tree (its timers and background jobs stop using CPU)."""
        for p in self._tree():
            p.suspend()

    def resume(self) -> None:
        """SIGCONT the process tree."""
        for p in self._tree():
            p.resume()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@contextmanager
def only(measured: Server, others: list[Server]) -> Iterator[None]:
    """While the block runs, every server in ``others`` except ``measured`` is stopped
    (SIGSTOP, then SIGCONT): proxies pinned to one core then share it with nobody, so
    another proxy's background work (timers, pollers, LiteLLM's jobs) cannot land in the
    measured proxy's segment."""
    paused = {s.proc.pid: s for s in others if s.proc.pid != measured.proc.pid}
    for s in paused.values():
        s.suspend()
    try:
        yield
    finally:
        for s in paused.values():
            s.resume()


def start(name: str, argv: list[str], port: int, cpu: set[int], log_dir: Path,
          env: dict[str, str] | None = None) -> Server:
    """Start ``argv`` pinned to ``cpu`` with output in ``log_dir/NAME.log``."""
    log = open(log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    pinned = cores(cpu)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    os.sched_setaffinity(proc.pid, pinned)  # children it starts later inherit the mask
    return Server(name, proc, port)


def wait_ready(server: Server, probe: callable, timeout_s: float = 120.0) -> None:
    """Call ``probe(url)`` until it returns True; raise RuntimeError on exit or timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.proc.returncode}")
        try:
            if probe(server.url):
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{server.name} not ready after {timeout_s} s")
