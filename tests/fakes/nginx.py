"""A real ``nginx`` in front of router replicas, for tests: the reference config of
``deploy/nginx/llmroute.conf`` with its ``server`` lines replaced by the given replicas and
its ``listen`` by a free loopback port, inside a generated main config (no daemon, the
``-p`` prefix, pid, error log, access log and temporary folders all in the test's folder).

The access log writes one line per request, ``STATUS UPSTREAM_STATUSES``
(``$upstream_status``: ``503, 200`` when a replica refused and the next one answered); every
answer carries ``x-upstream-addr`` (the replica that answered, ``host:port``).

The binary is ``$LLMROUTE_NGINX``, ``nginx`` on the PATH or ``/usr/sbin/nginx`` (``make
test`` installs Debian's ``nginx`` package when it is missing); ``find_nginx()`` is None when
none exists, and tests that need it skip with ``MISSING``.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.fakes.redis import free_port

REFERENCE = Path(__file__).resolve().parents[2] / "deploy" / "nginx" / "llmroute.conf"
MISSING = ("no nginx binary: install Debian's nginx package (make test does) or set "
           "LLMROUTE_NGINX")


def find_nginx() -> str | None:
    """The nginx binary's path, or None."""
    given = os.environ.get("LLMROUTE_NGINX")
    if given:
        return given if os.access(given, os.X_OK) else None
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None


def site_config(ports: list[int], listen: int) -> str:
    """The reference config with its replicas on ``127.0.0.1:ports`` and nginx listening on
    ``127.0.0.1:listen``."""
    text = REFERENCE.read_text()
    server = re.search(r"^ *server 10\.0\.0\.\d+:8000 (.*);$", text, re.M)
    assert server is not None, "the reference config lost its server lines"
    lines = "".join(f"    server 127.0.0.1:{p} {server.group(1)};\n" for p in ports)
    text = re.sub(r"(^ *server 10\.0\.0\.\d+:8000 .*;\n)+", lines, text, flags=re.M)
    return text.replace("listen 80;", f"listen 127.0.0.1:{listen};")


def main_config(folder: Path, site: str) -> str:
    """A whole nginx.conf around ``site`` (one worker, everything under ``folder``); as
    root the worker keeps root's user (the test folder is not readable by nobody)."""
    user = ""
    if os.geteuid() == 0:
        user = f"user {pwd.getpwuid(0).pw_name} {grp.getgrgid(0).gr_name};\n"
    temps = "".join(f"    {kind}_temp_path {folder / kind};\n"
                    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return (f"{user}daemon off;\nworker_processes 1;\npid {folder / 'nginx.pid'};\n"
            f"error_log {folder / 'error.log'} info;\nevents {{ worker_connections 1024; }}\n"
            f"http {{\n{temps}"
            "    log_format llmroute '$status $upstream_status';\n"
            f"    access_log {folder / 'access.log'} llmroute;\n"
            "    add_header x-upstream-addr $upstream_addr always;\n"
            f"{site}}}\n")


class Nginx:
    """nginx on a free loopback port (``url``) in front of the replicas on ``ports``."""

    def __init__(self, binary: str, folder: Path, ports: list[int]):
        self.binary, self.folder = binary, folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.conf = folder / "nginx.conf"
        self.conf.write_text(main_config(folder, site_config(ports, self.port)))
        self._proc: subprocess.Popen[bytes] | None = None

    def _args(self) -> list[str]:
        return [self.binary, "-p", str(self.folder), "-e", str(self.folder / "error.log"),
                "-c", str(self.conf)]

    def check(self) -> None:
        """``nginx -t`` on the config; RuntimeError with nginx's words when it is refused."""
        checked = subprocess.run([*self._args(), "-t"], capture_output=True, text=True,
                                 timeout=30)
        if checked.returncode != 0:
            raise RuntimeError(f"nginx -t: {checked.stderr}")

    def start(self, timeout_s: float = 10.0) -> None:
        """Check the config, start nginx and wait until it accepts connections
        (RuntimeError with its error log if not)."""
        self.check()
        self._proc = subprocess.Popen(self._args(), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"nginx exited with {self._proc.returncode}: "
                                   f"{self.error_log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"nginx did not listen on {self.port}: {self.error_log()}")

    def stop(self) -> None:
        """Stop nginx (SIGQUIT, its graceful stop; SIGKILL after 5 s)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGQUIT)
            try:
                self._proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def error_log(self) -> str:
        """The last of nginx's error log."""
        path = self.folder / "error.log"
        return path.read_text()[-4000:] if path.exists() else ""

    def access(self) -> list[tuple[int, str]]:
        """One ``(status, upstream statuses)`` per request logged so far."""
        path = self.folder / "access.log"
        rows = path.read_text().splitlines() if path.exists() else []
        return [(int(r.split(" ", 1)[0]), r.split(" ", 1)[1]) for r in rows]
