"""The demo's terminal output: a start-up progress bar and one table row per request."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.cells import set_cell_size
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from llmroute.demo.runner import Row

COLUMNS = [("prompt", 40), ("intent", 16), ("pool", 12), ("backend", 10), ("mode", 4),
           ("TTFT ms", 7), ("tok/s", 6), ("handoffs", 8), ("ok", 3)]


@contextmanager
def startup_bar(console: Console) -> Iterator[Callable[[float, str], None]]:
    """A progress bar for building/starting engines; yields ``update(fraction, message)``."""
    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("starting engines", total=1.0)

        def update(fraction: float, message: str) -> None:
            bar.update(task, completed=min(max(fraction, 0.0), 1.0), description=message[:60])
        yield update
        bar.update(task, completed=1.0, description="engines ready")


def header(console: Console) -> None:
    """Print the column titles."""
    console.print(" ".join(set_cell_size(name, w) for name, w in COLUMNS), style="bold",
                  soft_wrap=True)


def row_line(row: Row) -> str:
    """One request as a line of fixed-width cells (CJK characters count two cells)."""
    ttft = f"{row.ttft_ms:.0f}" if row.ttft_ms is not None else "-"
    tps = f"{row.tokens_per_s:.1f}" if row.tokens_per_s is not None else "-"
    cells = [row.prompt, row.intent, row.pool, row.backend, "sse" if row.stream else "json",
             ttft, tps, str(row.handoffs), "yes" if row.ok else "NO"]
    return " ".join(set_cell_size(c, w) for c, (_, w) in zip(cells, COLUMNS))


def summary(console: Console, rows: list[Row]) -> None:
    """Totals: answered requests, and requests per pool and per backend."""
    ok = sum(r.ok for r in rows)
    table = Table(title=f"{ok}/{len(rows)} requests answered")
    table.add_column("backend")
    table.add_column("pool")
    table.add_column("requests", justify="right")
    for (backend, pool), n in sorted(Counter((r.backend, r.pool) for r in rows).items()):
        table.add_row(backend, pool, str(n))
    console.print(table)
    for r in rows:
        if not r.ok:
            console.print(f"[red]not answered[/red] {r.label}: {r.error or 'empty answer'}")
