"""``workers_2_cpu_efficiency`` for ``bench/scale.py``: requests served per second of router
CPU with ``llmroute serve --workers 2`` sharing state through Redis, against one process
with in-process state, on a fast scripted upstream (``bench/lib/upstream.py``).

Both routers run the same config (auth on, one key with limits high enough never to refuse,
the gate off, one ``openai`` backend at the upstream); the only differences are ``state``
(``memory`` vs ``redis``) and ``--workers``. A closed-loop load generator
(``bench/lib/loadgen.py``, its own process) drives each for the same time with the same
number of clients per router process (16, full run 32: twice as many for the two workers,
so each process has as many requests in flight as the single one has); the router's CPU
is that of its whole process tree (psutil: the parent and its workers) — never the load
generator's, the upstream's or Redis's. No process is pinned, on either side: the two
workers need both cores, and pinning the single process to one core while the other side
spreads over two would measure the two sides differently; all of them share this 2-core
machine alike. Redis's own CPU (``INFO cpu``) and commands (``INFO commandstats``) per
served request are reported beside each row, not counted in its efficiency. Efficiency =
(served / CPU s with 2 workers) / (served / CPU s with 1 process): 1.0 means sharing state
through Redis costs the second core nothing. Raw throughput (served per wall second) is
reported beside it: on a 2-core machine shared with the load generator and the upstream it
cannot double. ``workers_1_redis_cpu_efficiency`` (one process on Redis state against one on
in-process state) tells what of the difference is the Redis calls themselves and what is
the second process. ``workers_2_cpu_efficiency_same_clients`` drives the two workers with
the single process's clients (half the requests in flight per process): an asyncio
process with fewer requests in flight handles fewer of them per turn of its event loop
and spends more CPU on each, Redis or not (one process on in-process state measured
0.70–0.94 as many requests per CPU second with 8 clients as with 16), so that figure mixes
the cost of sharing state with the cost of a lighter load per process.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import redis
from fakes.fleet import ENV, create_key, fleet_config

import procs
from modes import pick

LIB = Path(__file__).resolve().parent


def answers(path: str):
    """A readiness probe: True once ``url + path`` answers at all (any status)."""
    def probe(url: str) -> bool:
        try:
            return httpx.get(url + path, timeout=1).status_code < 600
        except httpx.HTTPError:
            return False
    return probe


def serve(name: str, config: Path, work: Path, *extra: str) -> procs.Server:
    """``llmroute serve`` of ``config`` (``extra`` CLI arguments) on a free port, its log in
    ``work``; returned once ``/ready`` answers."""
    port = procs.free_port()
    server = procs.start(name, [sys.executable, "-m", "llmroute.cli.main", "serve", "--config",
                                str(config), "--port", str(port), "--log-level", "warning",
                                *extra], port, set(), work, env=ENV)
    procs.wait_ready(server, answers("/ready"))
    return server


@contextlib.contextmanager
def upstream(work: Path) -> Iterator[procs.Server]:
    """The fast scripted upstream (``upstream.py``: one short JSON answer at once) on a free
    port, its log in ``work``; stopped on exit."""
    port = procs.free_port()
    up = procs.start("upstream", [sys.executable, str(LIB / "upstream.py"), str(port), "1", "0"],
                     port, set(), work)
    try:
        procs.wait_ready(up, answers("/"))
        yield up
    finally:
        up.stop()


def _redis_usage(redis_url: str) -> tuple[int, float]:
    """Commands Redis has run so far (``INFO commandstats``, without INFO itself) and its
    CPU seconds (``INFO cpu``: user + system of the server's main thread and children)."""
    client = redis.Redis.from_url(redis_url)
    try:
        stats, cpu = client.info("commandstats"), client.info("cpu")
    finally:
        client.close()
    return (sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info"),
            cpu["used_cpu_user"] + cpu["used_cpu_sys"])


def _drive(server: procs.Server, key: str, seconds: float, clients: int,
           redis_url: str) -> dict[str, float]:
    """One closed-loop run; served, router CPU seconds, wall seconds, errors, Redis
    commands per served request (every command Redis ran meanwhile: the scripts' own
    commands count, background sharing too) and Redis's own CPU per served request (not
    in ``cpu_s``, which is the router's alone)."""
    spec = {"url": server.url + "/v1/chat/completions", "key": key, "stream": False,
            "mode": "closed", "clients": clients, "duration_s": seconds, "warmup_s": 1.0,
            "model": "auto"}
    cpu0, (commands0, redis_cpu0) = server.cpu_s(), _redis_usage(redis_url)
    done = subprocess.run([sys.executable, str(LIB / "loadgen.py"), json.dumps(spec)],
                          capture_output=True, text=True, check=True)
    cpu = server.cpu_s() - cpu0
    commands, redis_cpu = _redis_usage(redis_url)
    out = json.loads(done.stdout)
    return {"served": out["served"], "cpu_s": cpu, "wall_s": out["duration_s"] + 1.0,
            "errors": out["errors"], "redis_commands": commands - commands0,
            "redis_cpu_s": redis_cpu - redis_cpu0}


def _one(work: Path, redis_url: str, upstream: str, workers: int, kind: str, seconds: float,
         clients: int) -> dict[str, float]:
    folder = work / f"w{workers}-{kind}"
    folder.mkdir(parents=True)
    state = {"kind": kind}
    config = fleet_config(folder, redis_url, [{"id": "a", "base_url": upstream}],
                          state=state, server={"drain_timeout_s": 2})
    key = create_key(config, "--rpm", "100000000", "--max-concurrency", "100000")
    extra = ("--workers", str(workers)) if workers > 1 else ()
    server = serve(f"router-{workers}", config, folder, *extra)
    try:
        return _drive(server, key, seconds, clients, redis_url)
    finally:
        server.stop()


def _row(runs: list[dict[str, float]]) -> dict[str, float]:
    """One configuration's runs summed: served per router CPU second and per wall second,
    Redis commands and Redis CPU per served request."""
    row = {k: sum(r[k] for r in runs) for k in runs[0]}
    served = row["served"] or 1
    row["per_cpu_s"] = row["served"] / row["cpu_s"] if row["cpu_s"] else 0.0
    row["per_s"] = row["served"] / row["wall_s"]
    row["redis_commands_per_request"] = row.pop("redis_commands") / served
    row["redis_cpu_ms_per_request"] = row.pop("redis_cpu_s") * 1000 / served
    return {k: round(v, 3) for k, v in row.items()}


def workers_cpu_efficiency(redis_url: str, size: str) -> dict[str, object]:
    """The measurement (module docstring) at run size ``size`` (``modes.MODES``):
    ``workers_2_cpu_efficiency`` and the rows. The
    configurations run in turn, then (in a full run) once more in the reverse order,
    and each row sums its runs, so a drift in the shared machine's load over the
    measurement weighs on every configuration alike."""
    seconds, clients = pick(size, (8.0, 32), (3.0, 16), (0.5, 4))
    configs = [(1, "memory", clients), (1, "redis", clients), (2, "redis", 2 * clients),
               (2, "redis", clients)]
    order = configs + configs[::-1] if size == "full" else configs
    runs: dict[tuple[int, str, int], list[dict[str, float]]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with upstream(work) as up:
            for i, (workers, kind, n) in enumerate(order):
                runs[workers, kind, n].append(_one(work / str(i), redis_url, up.url, workers,
                                                   kind, seconds, n))
    one, one_redis, two, two_same = (_row(runs[c]) for c in configs)

    def ratio(row: dict[str, float]) -> float:
        return round(row["per_cpu_s"] / one["per_cpu_s"], 3) if one["per_cpu_s"] else 0.0
    return {"workers_2_cpu_efficiency": ratio(two),
            "workers_2_cpu_efficiency_same_clients": ratio(two_same),
            "workers_throughput_rps": {"1": one["per_s"], "2": two["per_s"]},
            "workers_1_redis_cpu_efficiency": ratio(one_redis),
            "workers_clients_per_process": clients,
            "workers_rows": {"1": one, "1-redis": one_redis, "2": two,
                             "2-same-clients": two_same}}
