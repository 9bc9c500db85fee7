"""Router CPU per request with observation on and off, in one process per path: the
real app (``create_app`` over ``open_runtime``, uvloop) driven through its ASGI callable —
no client library, no socket on the client side — in front of ``bench/lib/upstream.py``
(its own process). ``plain`` is ``bench/overhead.py``'s ``llmroute`` path (gate off, log
level warning); ``observed`` adds the per-request log line at info (rendered as ``llmroute
serve`` does, to a file) and the SQLite decision audit; traces and metrics are on in both.

    python bench/observe_cpu.py [--quick | --smoke] [--clients N]

CPU is the process's own (``time.process_time``: the event loop and the audit writer
thread together), measured after a warm-up and after the audit has written everything;
the median over rounds, each round a fresh process per path, the paths alternated. On a
shared machine these figures drift by tens of percent between runs: compare instruction
counts there. One path's process can run alone under callgrind, against an upstream already
listening (``bench/lib/upstream.py PORT 20 1.0``)::

    LLMROUTE_CALLGRIND=1 valgrind --tool=callgrind python bench/observe_cpu.py \
        --child observed --upstream http://127.0.0.1:PORT -n 300 --clients 1 --rounds 1

``LLMROUTE_CALLGRIND=1`` zeroes the counters after the warm-up and dumps them after the
measured requests (``callgrind_control``): the dump (``callgrind.out.PID.1``) holds the
instructions of those requests only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "lib"))

import procs  # noqa: E402 - bench/lib, as bench/overhead.py does
from modes import mode, parser, pick  # noqa: E402
BODY = json.dumps({"model": "bench",
                   "messages": [{"role": "user", "content": "hello there"}]}).encode()


def config_text(upstream: str, observed: bool, folder: str) -> str:
    """The path's config (``bench/overhead.py``'s, gate off)."""
    text = f"""pools: {{bench: {{}}}}
backends:
  - {{id: up, pool: bench, engine: openai, base_url: "{upstream}", model: bench,
     context_length: 32768}}
routing: {{default_pool: bench}}
gate: {{kind: off}}
"""
    if observed:
        text += f'observe: {{log_requests: true, audit: {{path: "{folder}/audit.sqlite3"}}}}\n'
    return text


def scope() -> dict[str, Any]:
    """One chat request's ASGI scope."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
            "headers": [(b"host", b"r"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(BODY)).encode())],
            "client": ("127.0.0.1", 1), "server": ("r", 80)}


async def one(app: Any) -> None:
    """Send one request through ``app``; raises AssertionError unless it answers 200."""
    sent, status = False, []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": BODY, "more_body": False}
        await asyncio.Event().wait()
        return {}

    async def send(msg: dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            status.append(msg["status"])

    await app(scope(), receive, send)
    assert status == [200], status


async def callgrind(flag: str) -> None:
    """``callgrind_control FLAG`` on this process, keeping the loop awake meanwhile."""
    proc = subprocess.Popen(["callgrind_control", flag, str(os.getpid())],
                            stdout=subprocess.DEVNULL)
    while proc.poll() is None:
        await asyncio.sleep(0.005)


async def child(observed: bool, upstream: str, n: int, clients: int, rounds: int
                ) -> list[float]:
    """In the path's process: µs of CPU per request, one figure per round."""
    from llmroute.api.app import create_app
    from llmroute.assemble.runtime import open_runtime
    from llmroute.config import parse_config

    folder = tempfile.mkdtemp()
    config = parse_config(config_text(upstream, observed, folder), "bench")
    grind = os.environ.get("LLMROUTE_CALLGRIND") == "1"
    async with open_runtime(config) as rt:
        app = create_app(config, runtime=rt)

        async def batch(total: int) -> None:
            async def worker() -> None:
                for _ in range(total // clients):
                    await one(app)
            await asyncio.gather(*(worker() for _ in range(clients)))
            if rt.observer.audit is not None:
                await rt.observer.audit.flush()

        await batch(min(n, 400))
        gc.collect()
        gc.freeze()  # as llmroute serve does (assemble/serve.serving_gc)
        gc.set_threshold(10_000, *gc.get_threshold()[1:])
        out = []
        for _ in range(rounds):
            if grind:
                await callgrind("-z")
            t = time.process_time()
            await batch(n)
            out.append((time.process_time() - t) / n * 1e6)
            if grind:
                await callgrind("-d")
    return out


def run_path(name: str, upstream: str, n: int, clients: int, rounds: int, work: Path
             ) -> list[float]:
    """Run one path in its own process (structlog's configuration is per process), pinned
    to core 1 as ``bench/overhead.py`` pins the proxies, its log lines going to a file as
    the served router's do."""
    argv = [sys.executable, __file__, "--child", name, "--upstream", upstream, "-n", str(n),
            "--clients", str(clients), "--rounds", str(rounds)]
    with open(work / f"{name}.log", "wb") as err:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, check=True, text=True,
                              preexec_fn=lambda: os.sched_setaffinity(0, procs.cores({1})))
    return json.loads(done.stdout.splitlines()[-1])


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--child", choices=("plain", "observed"), help=argparse.SUPPRESS)
    p.add_argument("--upstream", help=argparse.SUPPRESS)
    p.add_argument("-n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        import uvloop

        from llmroute.observe.logging import configure_logging

        observed = args.child == "observed"
        configure_logging("info" if observed else "warning", json=True)
        res = uvloop.run(child(observed, args.upstream, args.n, args.clients, args.rounds))
        print(json.dumps(res))
        return 0
    n, rounds = pick(mode(args), (3000, 5), (1000, 3), (40, 1))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = procs.free_port()
        up = procs.start("upstream", [sys.executable, str(HERE / "lib" / "upstream.py"),
                                      str(port), "20", "1.0"], port, {0}, work)
        try:
            procs.wait_ready(up, lambda url: socket.create_connection(
                ("127.0.0.1", port), timeout=1).close() is None, timeout_s=30)
            runs: dict[str, list[float]] = {"plain": [], "observed": []}
            for _ in range(rounds):  # alternated: a machine whose load drifts hits both
                for name, got in runs.items():
                    got += run_path(name, up.url, n, args.clients, 1, work)
            res = {name: statistics.median(got) for name, got in runs.items()}
        finally:
            up.stop()
    ratio = res["plain"] / res["observed"]
    print(f"{'path':<10}{'CPU µs/request':>16}   ({args.clients} client(s), {n} requests, "
          f"median of {rounds})")
    for name, us in res.items():
        print(f"{name:<10}{us:>16.1f}")
    print(f"observed costs {res['observed'] - res['plain']:.1f} µs more per request; "
          f"throughput ratio on one core ~{ratio:.2f}")
    print("RESULT " + json.dumps({"plain_cpu_us": round(res["plain"], 1),
                                  "observed_cpu_us": round(res["observed"], 1),
                                  "added_cpu_us": round(res["observed"] - res["plain"], 1),
                                  "cpu_throughput_ratio": round(ratio, 3),
                                  "clients": args.clients}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
