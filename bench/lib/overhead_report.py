"""Tables, plot and RESULT figures for bench/overhead.py."""

from __future__ import annotations

import platform
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

PCTS = (50, 95, 99)


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values`` (ms); NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def summarise(cells: dict) -> dict:
    """Per cell: p50/p95/p99 (ms), added vs direct (ms), req/s, CPU ms/request, µs/chunk."""
    rows = {}
    for (name, load, stream), c in cells.items():
        lat = c["latencies_ms"]
        n = len(lat)
        rows[(name, load, stream)] = {
            **{f"p{p}": pct(lat, p) for p in PCTS},
            "rps": n / c["duration_s"] if c["duration_s"] else 0.0,
            # the proxy's CPU covers the warm-up too, so divide by everything it served
            "cpu_ms_per_req": c["cpu_s"] / c["served"] * 1000 if c["served"] else float("nan"),
            "cpu_us_per_chunk": (c["cpu_s"] / c["chunks_all"] * 1e6 if c["chunks_all"]
                                 else float("nan")),
            "errors": c["errors"], "n": n, "round_rps": c.get("round_rps", [])}
    for (name, load, stream), r in rows.items():
        base = rows[("direct", load, stream)]
        for p in PCTS:
            r[f"added_p{p}"] = r[f"p{p}"] - base[f"p{p}"]
    return rows


def paired_ratio(rows: dict, path: str, base: str, load: tuple, stream: bool = False) -> float:
    """Throughput of ``path`` over ``base`` at ``load``: with the same number (≥ 2) of
    interleaved rounds on both, the median over rounds of the ratio of their segments in
    that round (two segments measured seconds apart share the machine's state then; a slow
    second moves one pair, not the figure); else the ratio of their pooled req/s."""
    a, b = rows[(path, load, stream)], rows[(base, load, stream)]
    ra, rb = a.get("round_rps", ()), b.get("round_rps", ())
    if len(ra) == len(rb) >= 2 and all(rb):
        return statistics.median(x / y for x, y in zip(ra, rb))
    return a["rps"] / b["rps"]


def table(rows: dict, servers: dict, console: Console) -> None:
    """Print one table row per path × load × mode."""
    t = Table(title="llmroute overhead (ms; added = path − direct at the same percentile)")
    for col in ("path", "load", "mode", "p50", "p99", "+p50", "+p95", "+p99", "req/s",
                "CPU ms/req", "CPU µs/chunk", "peak RSS MB", "errors"):
        t.add_column(col, justify="right" if col not in ("path", "load", "mode") else "left")
    for (name, load, stream), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        direct = name.startswith("direct")
        cpu = "-" if direct else f"{r['cpu_ms_per_req']:.2f}"
        chunk = "-" if direct or not stream else f"{r['cpu_us_per_chunk']:.0f}"
        t.add_row(name, f"{load[0]}:{load[1]}", "sse" if stream else "json",
                  f"{r['p50']:.2f}", f"{r['p99']:.2f}", f"{r['added_p50']:.2f}",
                  f"{r['added_p95']:.2f}", f"{r['added_p99']:.2f}", f"{r['rps']:.0f}", cpu,
                  chunk, f"{servers[name].peak_rss / 2**20:.0f}", str(r["errors"]))
    console.print(t)


def plot(rows: dict, out: Path) -> Path:
    """Bar chart of added p50/p99 per path at each closed-loop load (non-streamed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = [p for p in ("passthrough", "llmroute", "llmroute-gate", "llmroute-observed",
                         "llmroute-policies", "litellm") if (p, ("closed", 1), False) in rows]
    loads = [load for load in (("closed", 1), ("closed", 16), ("closed", 128))
             if ("direct", load, False) in rows]
    fig, axes = plt.subplots(1, len(loads), figsize=(13, 4), squeeze=False)
    axes = axes[0]
    for ax, load in zip(axes, loads):
        p50 = [rows[(p, load, False)]["added_p50"] for p in paths]
        p99 = [rows[(p, load, False)]["added_p99"] for p in paths]
        xs = range(len(paths))
        ax.bar([x - 0.2 for x in xs], p50, 0.4, label="added p50")
        ax.bar([x + 0.2 for x in xs], p99, 0.4, label="added p99")
        ax.set_xticks(list(xs), paths, rotation=20)
        ax.set_yscale("symlog")
        ax.set_title(f"{load[1]} client(s), non-streamed")
        ax.set_ylabel("ms")
    axes[0].legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "overhead.png"
    fig.savefig(path, dpi=110)
    return path


def key_figures(rows: dict, gate_p50_ms: dict[str, float]) -> dict:
    """The RESULT figures and their targets' inputs; ``gate_p50_ms``: the gate's own p50
    (ms) as the router reported it (``router``) and alone in-process (``paced``,
    ``back_to_back``)."""
    one, sixteen = ("closed", 1), ("closed", 16)
    lr, pt = "llmroute", "passthrough"
    added = rows[(lr, one, False)]["added_p50"]
    return {
        "added_p50_ms": round(added, 3),
        **_versus_litellm(rows),
        "throughput_ratio_vs_passthrough": round(paired_ratio(rows, lr, pt, sixteen), 3),
        "added_p50_ms_gate_on": round(rows[("llmroute-gate", one, False)]["added_p50"], 3),
        **_versus_llmroute(rows, "llmroute-observed", "observed"),
        **_versus_llmroute(rows, "llmroute-policies", "policies"),
        "gate_p50_ms": round(gate_p50_ms["router"], 3),
        "gate_p50_ms_in_process_paced": round(gate_p50_ms["paced"], 3),
        "gate_p50_ms_in_process_back_to_back": round(gate_p50_ms["back_to_back"], 3),
        **_paused(rows, gate_p50_ms),
        **surfaces(rows),
        "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
    }


def _versus_litellm(rows: dict) -> dict:
    """llmroute over LiteLLM: added p50 at 1 client, throughput at 16 clients, CPU per
    streamed chunk at 16 clients; None each when LiteLLM was not measured (a smoke run
    without it installed)."""
    lr, ll, one, sixteen = "llmroute", "litellm", ("closed", 1), ("closed", 16)
    if (ll, one, False) not in rows:
        return dict.fromkeys(("added_p50_ratio_vs_litellm", "throughput_ratio_vs_litellm",
                              "stream_cpu_ratio_vs_litellm"))
    return {"added_p50_ratio_vs_litellm": round(
                rows[(lr, one, False)]["added_p50"] / rows[(ll, one, False)]["added_p50"], 4),
            "throughput_ratio_vs_litellm": round(paired_ratio(rows, lr, ll, sixteen), 2),
            "stream_cpu_ratio_vs_litellm": round(
                rows[(lr, sixteen, True)]["cpu_us_per_chunk"]
                / rows[(ll, sixteen, True)]["cpu_us_per_chunk"], 4)}


def _versus_llmroute(rows: dict, path: str, name: str) -> dict:
    """``path`` next to plain llmroute in the same run: its throughput at 16 clients over
    llmroute's (``<name>_throughput_ratio``), its added p50 at 1 client (vs direct, ms:
    ``added_p50_ms_<name>``) and that minus llmroute's (``…_vs_llmroute``: what the path's
    extra work adds); empty when ``path`` was not measured. ``llmroute-observed``
    (``observed``): everything observed; ``llmroute-policies`` (``policies``): auth,
    never-binding limits, a 10,000-word filter on input and output."""
    lr, one, sixteen = "llmroute", ("closed", 1), ("closed", 16)
    if (path, one, False) not in rows:
        return {}
    added = rows[(path, one, False)]["added_p50"]
    return {f"{name}_throughput_ratio": round(paired_ratio(rows, path, lr, sixteen), 3),
            f"added_p50_ms_{name}": round(added, 3),
            f"added_p50_ms_{name}_vs_llmroute": round(
                added - rows[(lr, one, False)]["added_p50"], 3)}


SURFACE_PATHS = ("llmroute-messages", "llmroute-responses", "llmroute-responses-stored")


def surfaces(rows: dict) -> dict:
    """The translated surfaces next to the Chat Completions path on the same server, in the
    same rounds: CPU per request over llmroute's at 16 clients, non-streamed
    (``surface_cpu_ratio``, the target's) and streamed (``surface_cpu_ratio_sse``); empty
    when none was measured."""
    sixteen, out = ("closed", 16), {}
    for stream, key in ((False, "surface_cpu_ratio"), (True, "surface_cpu_ratio_sse")):
        base = rows.get(("llmroute", sixteen, stream))
        found = {p: rows[(p, sixteen, stream)] for p in SURFACE_PATHS
                 if (p, sixteen, stream) in rows}
        if base and found:
            out[key] = {p: round(r["cpu_ms_per_req"] / base["cpu_ms_per_req"], 3)
                        for p, r in found.items()}
    return out


def report_only(cells: dict, servers: dict, console: Console) -> dict:
    """``--only``: the table and the surfaces' figures (and their target)."""
    rows = summarise(cells)
    table(rows, servers, console)
    figures = surfaces(rows)
    for name, ratio in figures.get("surface_cpu_ratio", {}).items():
        ok = ratio <= 1.1
        console.print(f"{'met ' if ok else 'MISS'}  {name}: CPU per request ≤ 1.1× chat "
                      f"(16 clients): {ratio:.3f}")
    figures["cpu_ms_per_req"] = {f"{n}:{l[1]}:{'sse' if st else 'json'}":
                                 round(r["cpu_ms_per_req"], 4)
                                 for (n, l, st), r in rows.items() if n != "direct"}
    return figures


def _paused(rows: dict, gate_p50_ms: dict[str, float]) -> dict:
    """The controls' figures, when they ran (1 client, non-streamed): ``wait_ms``, the mean
    wait each control was given (the gate's p50 in the gate-on run before it), and each
    control's added p50 (ms): llmroute pausing that long before it reads the request
    (``bench/lib/paused.py``), and the direct call, the bare passthrough and llmroute (gate
    off) after an idle think time that long."""
    if "wait" not in gate_p50_ms:
        return {}
    out = {"wait_ms": round(gate_p50_ms["wait"], 3)}
    for name, key in (("llmroute-pause", "pause"), ("direct-idle", "direct_idle"),
                      ("passthrough-idle", "passthrough_idle"),
                      ("llmroute-idle", "llmroute_idle")):
        row = rows.get((name, ("closed", 1), False))
        if row is not None:
            out[f"added_p50_ms_{key}"] = round(row["added_p50"], 3)
    return out


def _controls(figures: dict, console: Console) -> None:
    """Print what the controls say about the gate-on figure."""
    if "added_p50_ms_pause" in figures:
        console.print(
            f"control: llmroute (gate off) pausing {figures['wait_ms']:.2f} ms per request "
            f"(no work) adds {figures['added_p50_ms_pause']:.2f} ms at 1 client, i.e. "
            f"{figures['added_p50_ms_pause'] - figures['wait_ms']:+.2f} ms beyond its pause; "
            f"with the gate: {figures['added_p50_ms_gate_on'] - figures['gate_p50_ms']:+.2f} ms "
            f"beyond the gate", soft_wrap=True)
    if "added_p50_ms_passthrough_idle" in figures:
        console.print(
            f"control: after an idle of {figures['wait_ms']:.2f} ms (think time, not counted) "
            f"the direct call takes {figures['added_p50_ms_direct_idle']:+.2f} ms, the bare "
            f"passthrough {figures['added_p50_ms_passthrough_idle']:+.2f} ms and llmroute (gate "
            f"off) {figures['added_p50_ms_llmroute_idle']:+.2f} ms longer than the direct call "
            f"back to back, at 1 client: the machine's price for idling that long, which the "
            f"gate-on path pays too", soft_wrap=True)


def report(cells: dict, servers: dict, gate_p50_ms: dict[str, float], console: Console,
           out: Path) -> dict:
    """Print the table and targets, save the plot; returns the RESULT dict."""
    rows = summarise(cells)
    table(rows, servers, console)
    figures = key_figures(rows, gate_p50_ms)
    console.print(f"plot: {plot(rows, out)}")
    versus = figures["throughput_ratio_vs_litellm"] is not None
    targets = [
        ("added p50 at 1 client ≤ 1.0 ms", figures["added_p50_ms"] <= 1.0),
        ("throughput ≥ 10× LiteLLM (16 clients)",
         versus and figures["throughput_ratio_vs_litellm"] >= 10),
        ("throughput ≥ 0.8× passthrough", figures["throughput_ratio_vs_passthrough"] >= 0.8),
        ("CPU per streamed chunk ≤ 1/10 LiteLLM",
         versus and figures["stream_cpu_ratio_vs_litellm"] <= 0.1),
        ("gate on: added p50 ≤ gate p50 + 1.0 ms",
         figures["added_p50_ms_gate_on"] <= figures["gate_p50_ms"] + 1.0),
    ]
    if "observed_throughput_ratio" in figures:
        targets += [("observed: throughput ≥ 0.9× llmroute (16 clients)",
                     figures["observed_throughput_ratio"] >= 0.9),
                    ("observed: added p50 at 1 client ≤ 1.0 ms",
                     figures["added_p50_ms_observed"] <= 1.0)]
    for name, ratio in figures.get("surface_cpu_ratio", {}).items():
        targets.append((f"{name}: CPU per request ≤ 1.1× chat (16 clients)", ratio <= 1.1))
    if "policies_throughput_ratio" in figures:
        targets += [("policies: throughput ≥ 0.85× llmroute (16 clients)",
                     figures["policies_throughput_ratio"] >= 0.85),
                    ("policies: added p50 at 1 client ≤ 1.0 ms",
                     figures["added_p50_ms_policies"] <= 1.0)]
    for name, ok in targets:
        console.print(f"{'met ' if ok else 'MISS'}  {name}")
    _controls(figures, console)
    return figures
