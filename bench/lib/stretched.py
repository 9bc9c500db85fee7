"""A server with its clock-driven work stretched ``FACTOR`` times, for a server that runs
that much slower (under valgrind: ``bench/instructions.py``).

    python bench/lib/stretched.py FACTOR llmroute serve --config … --port …
    python bench/lib/stretched.py FACTOR bench/lib/passthrough.py PORT UPSTREAM

A request served under callgrind takes 30-300 ms (with the machine's load) where it takes
well under 1 ms natively, so work paced by the clock rather than by requests would land on
each request 30-300 times as often as it does natively, and change with the machine's load:

- uvicorn's tick (``Server.main_loop``: every 0.1 s; with llmroute also the sweep of late
  request heads, ``api/server.py``) — measured: 130-230 k instructions a second, more
  while a connection is open, so ~2 % of a request at 0.1 s a request and a count that
  rose with the time a request took;
- llmroute's disconnect watcher, started ``WATCH_AFTER_S`` (50 ms) into a request
  (``api/exchange.py``), never for a native quick answer;
- the audit writer's batch, gathered for ``LINGER_S`` (50 ms: one transaction per ~50
  requests natively, per request here; ``observe/writer.py``), and the request log lines,
  held up to ``FLUSH_S`` (100 ms; ``observe/logging.py``);
- the file watchers' thread (``assemble/watch.py``), which wakes every ``STEP_MS`` (50 ms)
  and takes the GIL from a main thread that, under callgrind, is always busy, and hands
  back to the loop every ``TIMEOUT_MS`` (5 s);
- the limiter's quota periods, read against the clock every ``PERIODS_EVERY_S`` (1 s;
  ``policy/limits.py``), and the key cache's ``auth.cache_ttl_s`` (5 s; a config value:
  ``bench/instructions.py`` writes it stretched into the policies path's config) — at
  0.1-0.4 s a request, a key store read every 12-50 requests, as the load went.

Stretched by the slowdown, each runs as it does at native speed. Nothing else changes: the
same code serves the same requests. uvicorn's tick is stretched through the ``sleep`` its
server module calls (every ``asyncio.sleep`` of ``uvicorn.server``: the tick and the
shutdown's waits); llmroute's thresholds are module constants read when used.
"""

from __future__ import annotations

import asyncio
import runpy
import sys
import types
from typing import Any

import uvicorn.server

LLMROUTE = (("llmroute.api.exchange", "WATCH_AFTER_S", 1),
            ("llmroute.observe.writer", "LINGER_S", 1), ("llmroute.observe.logging", "FLUSH_S", 1),
            ("llmroute.assemble.watch", "STEP_MS", 10), ("llmroute.assemble.watch", "TIMEOUT_MS", 10),
            ("llmroute.policy.limits", "PERIODS_EVERY_S", 1))
"""llmroute's thresholds (module, name, how many times ``FACTOR`` they are stretched: the
file watchers' ten times more, as nothing a benchmark does changes a watched file); one
that does not exist (an older or newer tree) is named on stderr and left out."""


class _Asyncio(types.ModuleType):
    """``asyncio`` as uvicorn's server module sees it: ``sleep`` stretched."""

    def __init__(self, factor: float):
        super().__init__("asyncio")
        self.factor = factor

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float, result: Any = None) -> Any:
        return await asyncio.sleep(delay * self.factor, result)


def stretch(factor: float, llmroute: bool) -> None:
    """Stretch uvicorn's tick, and with ``llmroute`` its thresholds, ``factor`` times."""
    uvicorn.server.asyncio = _Asyncio(factor)  # type: ignore[attr-defined]
    if llmroute:
        import importlib

        for module_name, name, more in LLMROUTE:
            try:
                module = importlib.import_module(module_name)
                value = getattr(module, name)
                setattr(module, name, type(value)(value * factor * more))  # an int stays one
            except (ImportError, AttributeError):
                print(f"stretched: no {module_name}.{name}, not stretched", file=sys.stderr)


def main(argv: list[str]) -> int:
    """``FACTOR llmroute ARGS…`` or ``FACTOR SCRIPT.py ARGS…``; returns the exit code."""
    factor, target, rest = float(argv[0]), argv[1], argv[2:]
    stretch(factor, llmroute=target == "llmroute")
    if target == "llmroute":
        from llmroute.cli.main import main as llmroute_main

        return llmroute_main(rest)
    sys.argv = [target, *rest]
    runpy.run_path(target, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
