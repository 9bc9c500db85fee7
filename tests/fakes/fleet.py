"""Real ``llmroute serve`` processes for fleet tests: replicas (one process each, own port) or
one ``--workers N`` parent, on a config written to a temporary folder, sharing a Redis.

``fleet_config`` writes the YAML (gate off, auth on with a shared SQLite key store, Redis
state, the given backends by ``base_url``); ``Replica`` starts one process and waits for
``/health``; ``create_key`` runs ``llmroute keys create`` as the operator would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import AsyncIterator
from typing import Any

import httpx
import yaml

from tests.fakes.redis import free_port

SRC = Path(__file__).resolve().parents[2] / "src"
ADMIN_KEY = "sk-admin-fleet-test"
ENV = {**os.environ, "PYTHONPATH": str(SRC), "LLMROUTE_ADMIN_KEY": ADMIN_KEY}


def fleet_config(folder: Path, redis_url: str, backends: list[dict[str, Any]],
                 **extra: Any) -> Path:
    """Write ``folder/router.yaml`` and return its path: ``backends`` (``id``, ``base_url``,
    optional ``pool``) as ``openai`` engines in pool ``general``, auth on, keys in
    ``folder/keys.sqlite3``, state in ``redis_url`` under a prefix of its own; ``extra``
    sections are merged over these."""
    data: dict[str, Any] = {
        "server": {"drain_delay_s": 0.0, "drain_timeout_s": 5},
        "pools": {"general": {}},
        "backends": [{"pool": "general", "engine": "openai", "model": "m", **b}
                     for b in backends],
        "routing": {"default_pool": "general"},
        "gate": {"kind": "off"},
        "auth": {"enabled": True, "keys_path": str(folder / "keys.sqlite3")},
        "state": {"kind": "redis", "url": redis_url, "prefix": f"t{time.time_ns()}:"},
    }
    for section, value in extra.items():
        data[section] = {**data.get(section, {}), **value} if isinstance(value, dict) else value
    path = folder / "router.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def create_key(config: Path, *limits: str) -> str:
    """A new API key of tenant ``t`` (created when missing) with ``limits``, made as the
    operator would (``llmroute tenants create``, ``llmroute keys create``); its secret."""
    cli = [sys.executable, "-m", "llmroute.cli.main"]
    subprocess.run([*cli, "tenants", "create", "t", "--config", str(config)],
                   capture_output=True, text=True, env=ENV, timeout=60, check=True)
    done = subprocess.run([*cli, "keys", "create", "--config", str(config), "--tenant", "t",
                           *limits], capture_output=True, text=True, env=ENV, timeout=60,
                          check=True)
    return json.loads(done.stdout)["key"]


class Replica:
    """One ``llmroute serve`` process on ``port`` (``extra`` CLI arguments, e.g.
    ``--workers 2``); ``url`` is its base URL."""

    def __init__(self, config: Path, port: int, *extra: str, log: Path | None = None):
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self._log = open(log or config.with_name(f"serve-{port}.log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llmroute.cli.main", "serve", "--config", str(config),
             "--port", str(port), "--log-level", "warning", *extra],
            stdout=self._log, stderr=subprocess.STDOUT, env=ENV)

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Return once ``/health`` answers 200 (RuntimeError when the process exits or the
        time runs out)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llmroute serve exited with {self.proc.returncode}: "
                                   f"{self.log_text()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"llmroute serve on {self.port} did not start: {self.log_text()}")

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, wait (SIGKILL past ``timeout_s``); the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def log_text(self) -> str:
        """What the process wrote so far."""
        if not self._log.closed:
            self._log.flush()
        return Path(self._log.name).read_text()[-4000:]


@contextlib.asynccontextmanager
async def replicas(config: Path, n: int = 3) -> AsyncIterator[list[Replica]]:
    """``n`` replicas of ``config`` on free ports, started together; stopped (SIGTERM) on
    exit, each asserted to exit 0."""
    started = [Replica(config, free_port()) for _ in range(n)]
    try:
        await asyncio.gather(*[asyncio.to_thread(r.wait_ready) for r in started])
        yield started
    finally:
        codes = [r.stop() for r in started]
        assert codes == [0] * n, [r.log_text() for r in started]
