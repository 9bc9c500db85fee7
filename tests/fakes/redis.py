"""A real ``redis-server`` for tests: on a free loopback port, no persistence, its own
temporary directory; it can be killed and started again on the same port mid-test.

The binary is ``$LLMROUTE_REDIS_SERVER`` or ``redis-server`` on the PATH (``make test``
installs Debian's ``redis-server`` package when it is missing); ``find_redis_server()`` is
None when neither exists, and tests that need it skip with that reason.
"""

from __future__ import annotations

import os
import signal
import shutil
import socket
import subprocess
import time
from pathlib import Path

MISSING = ("no redis-server binary: install Debian's redis-server package (make test does) "
           "or set LLMROUTE_REDIS_SERVER")


def find_redis_server() -> str | None:
    """The redis-server binary's path, or None."""
    given = os.environ.get("LLMROUTE_REDIS_SERVER")
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which("redis-server")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server process on ``127.0.0.1:port`` (``url``), data only in memory."""

    def __init__(self, binary: str, workdir: Path, port: int | None = None):
        self.binary, self.workdir = binary, workdir
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the server and wait until it accepts connections (RuntimeError if not)."""
        self._proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), "--daemonize", "no",
             "--protected-mode", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self._proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def kill(self) -> None:
        """SIGKILL the server (its data is lost) and reap it."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def stop(self) -> None:
        """Stop the server if it runs (SIGTERM, then SIGKILL after 5 s)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.kill()
        self._proc = None

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open but nothing answers (a slow Redis)."""
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGCONT)
