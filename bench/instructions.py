"""Instructions per request on bench/overhead.py's four paths, counted by callgrind: the
request path's cost in a unit that does not move with the machine's speed or load.

    python bench/instructions.py [--quick | --smoke] [--stream] [--paths NAME ...] [-n N]

Paths, each a real server on loopback in front of the same fast upstream
(``bench/lib/upstream.py``): ``passthrough`` (the floor: Starlette + uvicorn + aiohttp, no
routing; ``bench/lib/passthrough.py``), ``llmroute`` (``llmroute serve``, gate off),
``llmroute-observed`` (gate off; the per-request log line at info to the server's log file
and the SQLite decision audit on; ``bench/lib/paths.py``) and ``llmroute-policies`` (gate
off; auth with a key whose limits never bind, a 10,000-word list filtering input and
output; ``bench/lib/policies.py``); on request (``--paths``) the translated surfaces
``llmroute-messages`` and ``llmroute-responses`` (``/v1/messages`` and ``/v1/responses``,
``store: false``, the same prompt and budget in their shapes) on the ``llmroute`` server,
priced against its chat path (``messages_vs_plain``, ``responses_vs_plain``). Each server
runs under ``valgrind --tool=callgrind --instr-atstart=no`` (``bench/lib/callgrind.py``);
the load generator and the upstream run natively and are never counted. A request under
callgrind takes 30-300 ms (with the machine's load) where it takes under 1 ms natively, so
every server starts with its clock-driven work stretched ``STRETCH`` times
(``bench/lib/stretched.py``: uvicorn's 0.1 s tick; llmroute's disconnect watcher, audit
batching, log-line hold, file watchers and the limiter's quota periods; the policies path's
key cache TTL, a config value, is written stretched into its config): what depends on
elapsed time then runs as it does at native speed, whatever the load. (Without it the
counts rose 2-4 % from an idle machine to a load average of 13, and the idle window's rate
did not predict the timers' share.)

Per path: ``WARMUP`` requests uninstrumented; an idle window (no request, ``IDLE_S``, the
client's connection open as during the requests: an open connection has timers of its own)
measures the instructions per second of the server's timers; then ``ROUNDS`` windows of
``n`` sequential requests on the same keep-alive connection (each answer read whole before
the next request; the bodies are the load generator's, ``loadgen.bodies``), instrumentation
turned on before the first request and off after the server has finished what the requests
left to do (the observed path: until the audit holds their rows and the log file their
lines). A window's instructions less the timers' rate times its length, over its requests,
is its instructions per request; a path's figure is the windows' total over all their
requests, and the spread is the lowest and highest window (Python's cyclic garbage
collector runs every 60-120 requests, ~3 M instructions each: a window of 100 holds zero,
one or two of them). ``PYTHONHASHSEED=0`` in the
servers, so dict and set layouts repeat run to run.

The ratios (RESULT ``plain_vs_passthrough``, ``observed_vs_plain``, ``policies_vs_plain``)
are of instructions per request, measured in the same run; targets: ≤ 1.9, ≤ 1.12, ≤ 1.15.
``--quick``: 3 windows of 100 requests (under 3 minutes on 2 cores); full: 5 of 400. The
dumps stay under ``$LLMROUTE_CACHE/bench/instructions-run`` (``callgrind_annotate`` them to
see where the instructions go; the path of each is printed).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

import callgrind
import modes
import policies
import procs
from loadgen import bodies
from paths import AUDIT, MASTER_KEY, cache_dir, chat_ok, router_config

HERE = Path(__file__).resolve().parent
LIB = HERE / "lib"
PATHS = ("passthrough", "llmroute", "llmroute-observed", "llmroute-policies")
SURFACES = {"llmroute-messages": ("messages", "/v1/messages"),
            "llmroute-responses": ("responses", "/v1/responses")}
"""The translated surfaces (asked for by ``--paths``), measured on the ``llmroute`` server:
the body's shape (``loadgen.bodies``) and the endpoint; Responses with ``store: false``."""
KEYS = {"passthrough": "passthrough", "llmroute": "plain", "llmroute-observed": "observed",
        "llmroute-policies": "policies", "llmroute-messages": "messages",
        "llmroute-responses": "responses"}
"""Path → its name in the RESULT keys."""
TARGETS = {"plain_vs_passthrough": 1.9, "observed_vs_plain": 1.12, "policies_vs_plain": 1.15}
WARMUP = 100
IDLE_S = 1.5
"""The idle window (s): short enough that the client's connection outlives it and the
controls around it (uvicorn closes a keep-alive connection idle for 5 s)."""
CHUNKS, CHUNK_DELAY_MS = 20, 1.0
STRETCH = 40
"""How many times the servers' clock-driven work is stretched (``bench/lib/stretched.py``):
about the slowdown under callgrind, so what depends on elapsed time runs as natively."""
READY_TIMEOUT_S = 600.0
SETTLE_TIMEOUT_S = 120.0
START_TRIES = 3
REQUEST_LINE = b'"event":"request"'
"""How the observed path's per-request log line reads in its log file (JSON lines)."""


class Served:
    """One path's server under callgrind: where it answers, the key it is sent, the one
    keep-alive connection every request goes over (``conn``, opened by the first), and
    ``done(total)``: whether it has finished the work of ``total`` answered requests."""

    def __init__(self, name: str, server: procs.Server, counted: callgrind.Counted,
                 key: str, done: Callable[[int], bool] | None = None):
        self.name, self.server, self.counted, self.key = name, server, counted, key
        self.done = done or (lambda total: True)
        self.answered = self.reconnects = 0
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        self.api, self.endpoint = "chat", "/v1/chat/completions"

    def surface(self, name: str) -> Served:
        """Surface ``name`` (``SURFACES``) on this path's server and connection."""
        other = Served(name, self.server, self.counted, self.key, self.done)
        other.conn, other.answered = self.conn, self.answered
        other.api, other.endpoint = SURFACES[name]
        return other

    def probe(self, url: str) -> bool:
        """Whether the server answers a chat request with this path's key."""
        return chat_ok(url, key=self.key)

    def post(self, body: bytes, headers: dict[str, str]) -> http.client.HTTPResponse:
        """POST ``body`` to the path's endpoint; when the server had closed the idle
        connection (a machine so loaded that the controls took 5 s), once more on a new
        one (counted in ``reconnects``)."""
        try:
            self.conn.request("POST", self.endpoint, body, headers)
            return self.conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            self.conn.close()
            self.reconnects += 1
        self.conn.request("POST", self.endpoint, body, headers)
        return self.conn.getresponse()

    def close(self) -> None:
        """Close the connection and stop the server."""
        self.conn.close()
        self.server.stop()


def command(name: str, work: Path, upstream: str) -> tuple[list[str], str]:
    """Path ``name``'s server command (``{port}`` to fill in) and the key it is sent; its
    config (and for the policies path its key store and word list) written into
    ``work/config``, a folder of its own: llmroute watches its config file's folder, and
    the log files, the audit and the dumps written into ``work`` would wake its watcher
    (each burst handed to the loop, and filtered out, on the counted process)."""
    configs = work / "config"
    configs.mkdir(exist_ok=True)
    stretched = [sys.executable, str(LIB / "stretched.py"), str(STRETCH)]
    serve = [*stretched, "llmroute", "serve", "--port", "{port}", "--config"]
    if name == "passthrough":
        return [*stretched, str(LIB / "passthrough.py"), "{port}", upstream], MASTER_KEY
    if name == "llmroute-policies":
        config, key = policies.setup(configs, upstream, key_cache_ttl_s=5.0 * STRETCH)
        return [*serve, str(config), "--log-level", "warning"], key
    observed = name == "llmroute-observed"
    config = router_config(configs, upstream, False, observed=observed, data=work)
    return [*serve, str(config), "--log-level", "info" if observed else "warning"], MASTER_KEY


def observed_done(work: Path, log: Path) -> Callable[[int], bool]:
    """The observed path has finished ``total`` requests once the audit holds that many
    rows and its log file that many request lines."""
    def done(total: int) -> bool:
        lines = log.read_bytes().count(REQUEST_LINE) if log.exists() else 0
        if lines < total:
            return False
        try:
            with contextlib.closing(sqlite3.connect(f"file:{work / AUDIT}?mode=ro",
                                                    uri=True)) as conn:
                rows = conn.execute("SELECT count(*) FROM audit").fetchone()[0]
        except sqlite3.Error:
            return False
        return rows >= total
    return done


def start(names: list[str], work: Path, upstream: str) -> dict[str, Served]:
    """Start each path's server under callgrind (all at once: start-up is the slow part
    under valgrind) and wait until each answers. A server that finds its port taken
    meanwhile (exit 2: the port was free when picked, a minute earlier) starts again on
    another, up to ``START_TRIES`` times. A surface (``SURFACES``) is served by the
    ``llmroute`` path's server."""
    servers = list(dict.fromkeys("llmroute" if n in SURFACES else n for n in names))
    out = {name: launch(name, work, upstream) for name in servers}
    try:
        for name in servers:
            for _ in range(START_TRIES - 1):
                try:
                    procs.wait_ready(out[name].server, out[name].probe,
                                     timeout_s=READY_TIMEOUT_S)
                    break
                except RuntimeError:
                    if out[name].server.proc.poll() != 2:
                        raise
                    out[name] = launch(name, work, upstream)
            else:
                procs.wait_ready(out[name].server, out[name].probe, timeout_s=READY_TIMEOUT_S)
            out[name].answered = 1
    except BaseException:
        stop(out)
        raise
    return {name: out[name] if name in out else out["llmroute"].surface(name)
            for name in names}


def launch(name: str, work: Path, upstream: str) -> Served:
    """Start path ``name``'s server under callgrind on a free port (its earlier dumps
    removed)."""
    env = {"PYTHONHASHSEED": "0", policies.ADMIN_ENV: policies.ADMIN_KEY}
    argv, key = command(name, work, upstream)
    port = procs.free_port()
    dumps = work / f"{name}.callgrind"
    for old in work.glob(f"{name}.callgrind*"):
        old.unlink()
    argv = [a.replace("{port}", str(port)) for a in argv]
    server = procs.start(name, callgrind.argv(dumps, argv), port,
                         set(range(os.cpu_count() or 1)), work, env)
    done = observed_done(work, work / f"{name}.log") if name == "llmroute-observed" else None
    return Served(name, server, callgrind.Counted(server.proc.pid, dumps), key, done)


def stop(paths: dict[str, Served]) -> None:
    """Stop every server."""
    for p in paths.values():
        p.close()  # a surface closes its server's connection and server again: no-ops


def send(path: Served, n: int, stream: bool) -> None:
    """``n`` sequential requests on the path's keep-alive connection, each answer read
    whole; then wait until the server has finished their work. Raises RuntimeError for an
    answer that is not 200, or when the server does not settle in ``SETTLE_TIMEOUT_S``."""
    headers = {"content-type": "application/json", "authorization": f"Bearer {path.key}"}
    texts = bodies("bench", stream, path.api)
    for _ in range(n):
        resp = path.post(next(texts), headers)
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path.name}: {resp.status} {body[:200]!r}")
        path.answered += 1
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not path.done(path.answered):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path.name}: its work did not settle in {SETTLE_TIMEOUT_S} s")
        time.sleep(0.05)


def measure(path: Served, n: int, rounds: int, stream: bool, warmup: int = WARMUP) -> dict:
    """Warm up, count the idle rate, then ``rounds`` windows of ``n`` requests."""
    send(path, warmup, stream)
    idle = path.counted.idle(IDLE_S)
    windows = [path.counted.window(lambda: send(path, n, stream)) for _ in range(rounds)]
    each = [callgrind.per_request(w, n, idle) for w in windows]
    total = sum(w.instructions for w in windows)
    seconds = sum(w.seconds for w in windows)
    return {"per_request": (total - idle * seconds) / (n * rounds), "windows": each,
            "idle_per_s": idle, "timers_share": idle * seconds / total,
            "seconds_per_request": seconds / (n * rounds),
            "dumps": [str(w.dump) for w in windows]}


def ratios(res: dict[str, dict]) -> dict[str, float]:
    """The RESULT ratios among the measured paths (those whose two paths were measured)."""
    pairs = {"plain_vs_passthrough": ("llmroute", "passthrough"),
             "observed_vs_plain": ("llmroute-observed", "llmroute"),
             "policies_vs_plain": ("llmroute-policies", "llmroute"),
             "messages_vs_plain": ("llmroute-messages", "llmroute"),
             "responses_vs_plain": ("llmroute-responses", "llmroute")}
    return {k: round(res[a]["per_request"] / res[b]["per_request"], 3)
            for k, (a, b) in pairs.items() if a in res and b in res}


def table(res: dict[str, dict], n: int, rounds: int, stream: bool) -> None:
    """The human table."""
    kind = "streamed" if stream else "JSON"
    print(f"instructions per request (callgrind Ir, {kind}; {rounds} windows of {n} "
          f"sequential requests after {WARMUP} warm-up; timers' rate subtracted)")
    print(f"{'path':<20}{'per request':>14}{'windows min–max':>22}{'timers':>8}"
          f"{'s/request':>11}")
    for name, r in res.items():
        spread = f"{min(r['windows']) / 1e3:,.0f}k–{max(r['windows']) / 1e3:,.0f}k"
        print(f"{name:<20}{r['per_request']:>14,.0f}{spread:>22}"
              f"{r['timers_share']:>8.1%}{r['seconds_per_request']:>11.3f}")
    for key, value in ratios(res).items():
        target = TARGETS.get(key)
        verdict = "" if target is None else \
            f"   target ≤ {target}  {'met' if value <= target else 'MISSED'}"
        print(f"{key:<22}{value:>6.3f}{verdict}")
    for name, r in res.items():
        print(f"{name} dumps: {' '.join(r['dumps'])}")


def main() -> int:
    parser = modes.parser(__doc__.splitlines()[0])
    parser.add_argument("--stream", action="store_true", help="streamed requests (SSE)")
    parser.add_argument("--paths", nargs="+", choices=[*PATHS, *SURFACES], default=list(PATHS),
                        help="the paths to measure (default: the four; the surfaces "
                             "llmroute-messages and llmroute-responses on request)")
    parser.add_argument("-n", type=int, help="requests per window (default 100, full 400)")
    args = parser.parse_args()
    why = callgrind.missing()
    if why is not None:
        modes.skip(f"instructions: {why}")
    size = modes.mode(args)
    n, rounds, warmup = modes.pick(size, (args.n or 400, 5, WARMUP), (args.n or 100, 3, WARMUP),
                                   (args.n or 5, 1, 5))
    work = cache_dir() / "instructions-run"
    work.mkdir(exist_ok=True)
    port = procs.free_port()
    up = procs.start("upstream", [sys.executable, str(LIB / "upstream.py"), str(port),
                                  str(CHUNKS), str(CHUNK_DELAY_MS)], port,
                     set(range(os.cpu_count() or 1)), work)
    try:
        procs.wait_ready(up, chat_ok, timeout_s=30)
        paths = start(args.paths, work, up.url)
        try:
            res = {name: measure(p, n, rounds, args.stream, warmup)
                   for name, p in paths.items()}
        finally:
            stop(paths)
    finally:
        up.stop()
    table(res, n, rounds, args.stream)
    result = {**ratios(res), **{f"{KEYS[name]}_instructions": round(r["per_request"])
                                for name, r in res.items()},
              "requests": n * rounds, "stream": args.stream}
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
