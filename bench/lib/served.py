"""A real ``llmroute serve`` process over emulated engines running in a process of their own,
for the benchmarks that need both (``bench/reload.py``, ``bench/startup.py``)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import procs
from schedule_load import fleet_process

from llmroute.emulator.spec import EngineSpec


@contextlib.contextmanager
def emulated(specs: list[EngineSpec]) -> Iterator[list[str]]:
    """Serve one emulated engine per spec in a child process while the block runs; yields
    their base URLs."""
    ctx = mp.get_context("spawn")
    end, child = ctx.Pipe()
    proc = ctx.Process(target=fleet_process, args=(child,), daemon=True)
    proc.start()
    end.send(specs)
    try:
        yield [served[0] for served in end.recv()]  # (url, max_model_len, kv_events)
    finally:
        end.send("stop")  # the engines stop; then the process
        end.send(None)
        proc.join(10)


def config_text(backends: dict[str, str], gate: str = "off") -> str:
    """A config: one pool ``p`` over ``{backend_id: base_url}`` (engine kind ``emulator``,
    model ``m``), the gate of kind ``gate``."""
    rows = "".join(f'  - {{id: {i}, pool: p, engine: emulator, model: m, base_url: "{u}"}}\n'
                   for i, u in backends.items())
    return (f"gate: {{kind: {gate}}}\npools: {{p: {{}}}}\nbackends:\n{rows}"
            "routing: {default_pool: p}\n")


def serve(name: str, config: Path, work: Path, env: dict[str, str] | None = None
          ) -> procs.Server:
    """Start ``llmroute serve --config CONFIG`` on a free port (log in ``work``); returns at
    once, not waiting for it to answer."""
    port = procs.free_port()
    return procs.start(name, [sys.executable, "-m", "llmroute.cli.main", "serve", "--config",
                              str(config), "--port", str(port), "--log-level", "warning"],
                       port, set(), work, env=env)


def seconds_to_ready(server: procs.Server, started: float, timeout_s: float = 300.0) -> float:
    """Poll ``GET /ready`` every 10 ms until it answers 200; the seconds since ``started``
    (``time.monotonic()``). Raises RuntimeError when the process exits or ``timeout_s``
    passes first."""
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() - started < timeout_s:
            if server.proc.poll() is not None:
                raise RuntimeError(f"{server.name} exited with {server.proc.returncode}")
            try:
                if client.get(server.url + "/ready").status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.01)
    raise RuntimeError(f"{server.name} not ready after {timeout_s} s")
