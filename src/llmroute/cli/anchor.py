"""``llmroute backends --url URL``: a live, refreshing table of ``GET /debug/backends``.

One row per backend: pool, engine, breaker, collector state, the main engine signals
(running/waiting, KV-cache usage, idle/total slots, free VRAM GiB/GPU utilisation) with the
age of the newest reading, the router's in-flight count and p95 TTFT, every scorer's score
and the total. Stale readings are dimmed.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from llmroute.errors import SignalSourceError

SHORT = {"queue-depth": "queue", "kv-cache": "kv", "free-vram": "vram", "gpu-util": "gpu",
         "in-flight": "infl", "latency": "lat", "error-rate": "err", "throughput": "tps",
         "prefix-affinity": "prefix", "intent-fit": "intent", "health": "health"}
"""Short scorer names for the narrow ``scores`` column."""


def fetch_report(url: str, timeout_s: float = 2.0) -> dict[str, Any]:
    """The JSON of ``{url}/debug/backends``. Raises SignalSourceError when unreachable or
    not JSON."""
    target = url.rstrip("/") + "/debug/backends"
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as resp:  # noqa: S310 - user URL
            return json.loads(resp.read())
    except (OSError, ValueError) as exc:  # URLError/HTTPError are OSErrors
        raise SignalSourceError(f"GET {target}: {exc}") from exc


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _signal(row: dict[str, Any], name: str) -> Any:
    s = (row.get("signals") or {}).get(name)
    return None if s is None else s["value"]


def _pair(a: Any, b: Any) -> str:
    return "–" if a is None and b is None else f"{_fmt(a)}/{_fmt(b)}"


def _engine_cells(row: dict[str, Any]) -> list[str]:
    free = _signal(row, "gpu_mem_free_bytes")
    cells = [_pair(_signal(row, "running"), _signal(row, "waiting")),
             _fmt(_signal(row, "kv_cache_usage")),
             _pair(_signal(row, "idle_slots"), _signal(row, "total_slots")),
             _pair(None if free is None else round(free / 2**30, 1), _signal(row, "gpu_util"))]
    signals = (row.get("signals") or {}).values()
    ages = [s["age_s"] for s in signals if s.get("age_s") is not None]
    cells.append(_fmt(min(ages), 1) + "s" if ages else "–")
    if any(s.get("stale") for s in signals):
        cells = [f"[dim]{c}[/dim]" for c in cells]
    return cells


def _scores(row: dict[str, Any]) -> str:
    return " ".join(f"{SHORT.get(n, n)} {_fmt(v)}" for n, v in (row.get("scores") or {}).items())


COLUMNS = ("backend", "pool", "engine", "breaker", "poll", "run/wait", "kv", "slots",
           "GiB/gpu", "age", "in-flight", "p95 TTFT ms", "scores", "total")
NARROW = ("backend", "breaker", "run/wait", "kv", "slots", "age", "in-flight", "total")
"""The columns shown on a terminal narrower than ``WIDE`` characters."""
WIDE = 150


def render(report: dict[str, Any], wide: bool = True) -> Table:
    """The table for one ``/debug/backends`` report (stale engine readings dimmed); a narrow
    one (``NARROW`` columns) when ``wide`` is False."""
    columns = COLUMNS if wide else NARROW
    table = Table(title=f"llmroute backends — picker {report.get('picker')}")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in report.get("backends", []):
        router = row.get("router") or {}
        cells = dict(zip(COLUMNS, [
            row["id"], row["pool"], row["engine"], row["breaker"], row["collector"]["state"],
            *_engine_cells(row), _fmt(router.get("in_flight")),
            _fmt(router.get("ttft_p95_ms"), 0), _scores(row), _fmt(row.get("total"), 3)]))
        table.add_row(*(cells[c] for c in columns))
    return table


def watch(url: str, interval_s: float = 1.0, once: bool = False,
          console: Console | None = None) -> int:
    """Show the table, refreshing every ``interval_s`` seconds until Ctrl-C (or once).
    Returns the exit code: 0, or 1 when the router cannot be reached."""
    console = console or Console()
    try:
        first = fetch_report(url)
    except SignalSourceError as exc:
        console.print(f"llmroute: {exc.message}")
        return 1
    if once:
        console.print(render(first, console.width >= WIDE))
        return 0
    with Live(render(first, console.width >= WIDE), console=console,
              refresh_per_second=4) as live:
        while True:
            time.sleep(interval_s)
            try:
                live.update(render(fetch_report(url), console.width >= WIDE))
            except SignalSourceError as exc:
                live.update(f"[red]{exc.message}[/red]")
