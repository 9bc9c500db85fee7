"""What llmroute costs per request, next to a direct call, a bare passthrough proxy and the
LiteLLM proxy, all in one run against the same fast local upstream.

    python bench/overhead.py [--quick | --smoke]

Paths (interleaved round by round): ``direct`` (client → upstream), ``passthrough`` (the floor:
Starlette + uvicorn + aiohttp, no routing), ``llmroute`` (gate off), ``llmroute-gate`` (gate
on), ``llmroute-observed`` (gate off; the trace, metrics, the per-request log line at info
level, to the server's log file, and the SQLite decision audit all on),
``llmroute-policies`` (gate off; auth on with a key whose limits and cost budgets never bind, a
priced pool, a 10,000-word
sensitive-word list filtering input and output: ``bench/lib/policies.py``), ``litellm`` (LiteLLM proxy from PyPI, installed by this script in its own virtual
environment under ``$LLMROUTE_CACHE/bench``) and, at 1 client only, four controls:
``llmroute-pause``, llmroute with the gate off whose requests first wait (``asyncio.sleep``,
no work) as long as the gate took in the gate-on run just before (``bench/lib/paused.py``),
and ``direct-idle``, ``passthrough-idle`` and ``llmroute-idle``, those paths with each client
idling that long (think time, not counted) before each request. They show what merely
taking that long costs on the machine: the upstream and the load generator idle meanwhile,
and a request that follows an idle answers slower. Each proxy runs pinned to one core; the
upstream and the load generator share the other. While one path is measured every other
proxy is stopped (SIGSTOP, SIGCONT after its segment), so no other proxy's timers or
background jobs share its core. While measuring, the script holds a 0 µs CPU latency
QoS request (``bench/lib/idle.py``; ``--deep-idle`` leaves the machine as it is), so idle
cores poll instead of entering deep idle states. Loads: closed loop with 1, 16 and 128
clients and an open-loop fixed rate; streamed and not. Added latency = path − direct at the
same percentile. CPU per request and per streamed chunk are the proxy's own CPU seconds.

The gate's own p50 (``gate_p50_ms``, the gate-on target's reference) is what the router
itself reports in its ``server-timing: gate;dur=…`` header during the 1-client
non-streamed gate-on run: the gate timed in the serving process, under the same load, cache
and CPU conditions as the request it classified. For comparison the gate is also timed
alone, in-process on the same core, paced like that loop and back to back; inside the
serving process it runs slower than alone (its data and the encoder's weights share the
caches with the HTTP work).

``--smoke``: every path once at 1 and 16 clients for 0.3 s each, without LiteLLM (its
ratios are null) and without the CPU latency QoS request (idle cores would poll for the whole
run) — it shows the benchmark runs, not figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

import modes as _modes
import policies as _policies
import procs as _procs
from idle import shallow_idle
from overhead_report import report, report_only
from paths import MASTER_KEY, cache_dir, chat_ok, router_config
from rich.console import Console
from rich.progress import Progress

HERE = Path(__file__).resolve().parent
LIB = HERE / "lib"
LITELLM_VERSION = "1.108.7"
CHUNKS, CHUNK_DELAY_MS = 20, 1.0
PROXY_CORE, LOAD_CORE = {1}, {0}
def litellm_bin(console: Console) -> Path:
    """The ``litellm`` proxy executable, installed once into its own venv."""
    venv = cache_dir() / f"litellm-{LITELLM_VERSION}"
    exe = venv / "bin" / "litellm"
    if not exe.exists():
        console.print(f"installing litellm[proxy]=={LITELLM_VERSION} into {venv} (once, ~3 min)")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q",
                        f"litellm[proxy]=={LITELLM_VERSION}"], check=True)
    return exe


def _policies_config(work: Path, upstream: str) -> Path:
    """The policies path's config (its key store and word list written beside it); its
    key goes into ``KEYS``."""
    path, KEYS[POLICIES] = _policies.setup(work, upstream)
    return path


def _litellm_config(work: Path, upstream: str) -> Path:
    path = work / "litellm.yaml"
    path.write_text(f"""\
model_list:
  - model_name: bench
    litellm_params: {{model: openai/bench, api_base: "{upstream}/v1", api_key: sk-bench}}
litellm_settings: {{telemetry: false, drop_params: true, set_verbose: false}}
general_settings: {{master_key: "{MASTER_KEY}"}}
""")
    return path


POLICIES = "llmroute-policies"
"""The path with the gateway policies on; its requests carry its own key (``KEYS``)."""
KEYS: dict[str, str] = {}
"""Path name → the key its load generator sends instead of ``MASTER_KEY``."""


SURFACES = {"llmroute-messages": {"api": "messages", "path": "/v1/messages"},
            "llmroute-responses": {"api": "responses", "path": "/v1/responses"},
            "llmroute-responses-stored": {"api": "responses", "path": "/v1/responses",
                                          "store": True}}
"""The translated surfaces' paths, measured on the ``llmroute`` server: load generator spec
keys (the body's shape, the URL path, ``store``)."""


def start_all(work: Path, console: Console, only: set[str] | None = None,
              litellm: bool = True) -> dict[str, _procs.Server]:
    """Start the upstream and every proxy (``only``: those paths, and the servers their
    aliases need; LiteLLM unless ``litellm`` is false); returns them by path name once all
    answer."""
    py = sys.executable
    up = _procs.start("upstream", [py, str(LIB / "upstream.py"), str(port := _procs.free_port()),
                                   str(CHUNKS), str(CHUNK_DELAY_MS)], port, LOAD_CORE, work)
    servers = {"direct": up}
    llmroute = str(Path(py).with_name("llmroute"))
    specs = {
        "passthrough": [py, str(LIB / "passthrough.py"), "{port}", up.url],
        "llmroute": [llmroute, "serve", "--config", str(router_config(work, up.url, False)),
                     "--port", "{port}", "--log-level", "warning"],
        "llmroute-gate": [llmroute, "serve", "--config", str(router_config(work, up.url, True)),
                          "--port", "{port}", "--log-level", "warning"],
        "llmroute-observed": [llmroute, "serve", "--config",
                              str(router_config(work, up.url, False, observed=True)),
                              "--port", "{port}", "--log-level", "info"],
        POLICIES: [llmroute, "serve", "--config", str(_policies_config(work, up.url)),
                   "--port", "{port}", "--log-level", "warning"],
        "llmroute-pause": [py, str(LIB / "paused.py"), "{port}",
                           str(router_config(work, up.url, False))],
    }
    if litellm and (only is None or "litellm" in only):  # installed on first use (minutes)
        specs["litellm"] = [str(litellm_bin(console)), "--config",
                            str(_litellm_config(work, up.url)), "--port", "{port}",
                            "--num_workers", "1"]
    if only is not None:
        needed = only | {IDLED.get(n) or ("llmroute" if n in SURFACES else n) for n in only}
        specs = {n: a for n, a in specs.items() if n in needed}
    for name, argv in specs.items():
        port = _procs.free_port()
        argv = [a.replace("{port}", str(port)) for a in argv]
        servers[name] = _procs.start(name, argv, port, PROXY_CORE, work,
                                     {"LITELLM_LOG": "ERROR",
                                      _policies.ADMIN_ENV: _policies.ADMIN_KEY})
    servers |= {control: servers[path] for control, path in IDLED.items() if path in servers}
    servers |= {surface: servers["llmroute"] for surface in SURFACES if "llmroute" in servers}
    if only is not None:
        servers = {n: s for n, s in servers.items() if n in only or n == "direct"}
    try:
        for name, s in servers.items():
            key = KEYS.get(name, MASTER_KEY)
            _procs.wait_ready(s, lambda url, key=key: chat_ok(url, key=key), timeout_s=180)
    except BaseException:
        for s in servers.values():
            s.stop()
        raise
    return servers


def segment(server: _procs.Server, load: tuple[str, int], stream: bool, size: str,
            extra: dict | None = None) -> dict:
    """One measured run of ``load`` against ``server`` (``extra``: more load generator spec
    keys, ``headers`` or ``think_ms``); adds the proxy's CPU seconds. The caller stops the
    other proxies meanwhile (``procs.only``)."""
    mode, n = load
    spec = {"url": server.url + (extra or {}).get("path", "/v1/chat/completions"),
            "key": KEYS.get(server.name, MASTER_KEY), "stream": stream,
            "mode": mode, "clients": n, "rate": n,
            "duration_s": _modes.pick(size, 5.0, 1.5, 0.3),
            "warmup_s": _modes.pick(size, 1.0, 0.3, 0.1), **(extra or {})}
    cpu0 = server.cpu_s()
    proc = subprocess.Popen([sys.executable, str(LIB / "loadgen.py"), json.dumps(spec)],
                            stdout=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, _procs.cores(LOAD_CORE))
    stdout, _ = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"load generator failed with {proc.returncode}")
    result = json.loads(stdout)
    result["cpu_s"] = server.cpu_s() - cpu0
    server.sample_rss()
    return result


PAUSED = "llmroute-pause"
"""The control path (``bench/lib/paused.py``), run at 1 client only: llmroute with the gate
off, each request first waiting as long as the gate took in the gate-on run just before."""
IDLED = {"direct-idle": "direct", "passthrough-idle": "passthrough",
         "llmroute-idle": "llmroute"}
"""The other controls, run at 1 client only: the direct call, the bare passthrough and
llmroute with the gate off, each client idling before each request (think time, not counted)
as long as the gate took in the gate-on run just before: what the machine adds to a request
on each path that follows an idle that long."""
CONTROLS = (PAUSED, *IDLED)


def _control(name: str, gate_p50_ms: float) -> dict | None:
    """The load generator spec keys that make ``name`` wait ``gate_p50_ms``; None for the
    measured paths."""
    if name == PAUSED:
        return {"headers": {"x-bench-pause-ms": f"{gate_p50_ms:.3f}"}}
    if name in IDLED:
        return {"think_ms": gate_p50_ms}
    return SURFACES.get(name)


RATIO_ROUNDS = 5
"""With ``--quick``, rounds of the cells the targets read (non-streamed, 1 and 16 clients,
every path but LiteLLM, the gate-on one and the controls): one with the rest, then more,
interleaved path by path. Each throughput ratio is the median over rounds of the ratio of
the two paths' segments in that round (``overhead_report.paired_ratio``), and each 1-client
p50 is over the rounds' latencies pooled, so a second in which the machine ran slow (the load
generator and the upstream share one core with the machine's other work) moves one segment of
five, not a figure."""
RATIO_PATHS_SKIP = ("litellm", "llmroute-gate", *CONTROLS)
RATIO_LOADS = (("closed", 1), ("closed", 16))


def measure(servers: dict[str, _procs.Server], size: str, console: Console) -> dict:
    """Interleaved rounds over every path × load × stream (``--quick``: one, plus
    ``RATIO_ROUNDS - 1`` more of the ratios' cells; ``--smoke``: one, at 1 and 16 clients);
    latencies pooled per cell."""
    loads = [("closed", 1), ("closed", 16), ("closed", 128), ("open", 100)]
    loads = _modes.pick(size, loads, loads, loads[:2])
    cells: dict[tuple, dict] = {}
    rounds = _modes.pick(size, 3, 1, 1)
    quick = size == "quick"
    plan = [(r, load, stream, name) for r in range(rounds) for load in loads
            for stream in (False, True) for name in servers
            if name not in CONTROLS or load == ("closed", 1)]
    if quick:  # the cells the targets read get RATIO_ROUNDS rounds in all
        plan += [(r, load, False, name) for r in range(1, RATIO_ROUNDS) for load in RATIO_LOADS
                 for name in servers if name not in RATIO_PATHS_SKIP]
        plan += [(r, ("closed", 16), True, name) for r in range(1, RATIO_ROUNDS)
                 for name in servers if name in SURFACES or name == "llmroute" and any(
                     s in servers for s in SURFACES)]  # the surfaces' streamed target
    gate_p50 = 0.0
    proxies = [s for n, s in servers.items() if servers[n] is not servers["direct"]]
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("measuring", total=len(plan))
        for _, load, stream, name in plan:
            control = _control(name, gate_p50)
            with _procs.only(servers[name], proxies):
                res = segment(servers[name], load, stream, size, control)
            if name == "llmroute-gate" and res["gate_ms"]:
                gate_p50 = statistics.median(res["gate_ms"])
            cell = cells.setdefault((name, load, stream), {"latencies_ms": [], "errors": 0,
                                                           "chunks": 0, "cpu_s": 0.0,
                                                           "served": 0, "chunks_all": 0,
                                                           "duration_s": 0.0})
            for key in ("errors", "chunks", "cpu_s", "duration_s", "served", "chunks_all"):
                cell[key] += res[key]
            cell["latencies_ms"] += res["latencies_ms"]
            cell.setdefault("round_rps", []).append(
                len(res["latencies_ms"]) / res["duration_s"] if res["duration_s"] else 0.0)
            cell.setdefault("gate_ms", []).extend(res["gate_ms"])
            if control and name in CONTROLS:
                cell.setdefault("wait_ms", []).append(gate_p50)
            bar.update(task, advance=1, description=f"{name} {load[0]}:{load[1]} "
                                                    f"{'sse' if stream else 'json'}")
    return cells


def gate_p50_ms(gap_ms: float, n: int = 300) -> float:
    """The gate alone: its p50 classification time (ms) on the load generator's prompts,
    in-process and pinned to the proxies' core, paced like the 1-client closed loop (an
    idle ``gap_ms``, the direct path's p50 round trip, before each call; a core that idled
    runs the encoder ~25 % slower than a back-to-back loop, 2.8 vs 2.2 ms on this VM).
    ``gap_ms=0``: back to back. ``n`` calls, the first sixth not counted."""
    import asyncio

    from llmroute.api.wire import parse_chat
    from llmroute.config import parse_config
    from llmroute.assemble.gate import make_gate
    from loadgen import new_nonce, prompt

    config = parse_config(router_config(cache_dir(), "http://127.0.0.1:9", True).read_text(),
                          "gate")
    nonce = new_nonce()

    async def run() -> list[float]:
        gate = make_gate(config)
        await gate.start()
        times = []
        for i in range(n):
            # the load generator's prompts (same length, same tokens), each distinct so the
            # gate's cache does not answer
            body = {"model": "auto", "messages": [{"role": "user", "content": prompt(nonce, i)}]}
            request = parse_chat(body, str(i))
            await asyncio.sleep(gap_ms / 1000)
            t0 = time.perf_counter()
            await gate.classify(request)
            times.append((time.perf_counter() - t0) * 1000)
        await gate.close()
        return times[n // 6:]
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _procs.cores(PROXY_CORE))
    try:
        return statistics.median(asyncio.run(run()))
    finally:
        os.sched_setaffinity(0, allowed)


def main() -> None:
    parser = _modes.parser(__doc__.splitlines()[0])
    parser.add_argument("--only", help="measure only these paths (comma-separated; direct "
                        "always) and report the table and the surfaces' figures")
    parser.add_argument("--deep-idle", action="store_true",
                        help="let idle cores enter deep idle states as the machine is set up "
                             "(default: hold a 0 µs CPU latency QoS request while measuring)")
    args = parser.parse_args()
    size = _modes.mode(args)
    # a smoke run starts no LiteLLM: installing it takes ~3 min, and starting its proxy
    # took most of a 600 s smoke run on a loaded machine
    litellm = size != "smoke"
    console = Console(width=160)
    work = cache_dir() / "overhead-run"
    work.mkdir(exist_ok=True)
    idle_qos = (contextlib.nullcontext("not held (--deep-idle)") if args.deep_idle
                else contextlib.nullcontext("not held (--smoke)") if size == "smoke"
                else shallow_idle())
    with idle_qos as idle:
        console.print(f"CPU latency QoS request: {idle}")
        only = set(args.only.split(",")) if args.only else None
        servers = start_all(work, console, only, litellm)
        try:
            cells = measure(servers, size, console)
        finally:
            for s in servers.values():
                s.stop()
        if only is not None:
            print("RESULT " + json.dumps(report_only(cells, servers, console)))
            return
        calls = _modes.pick(size, 300, 300, 30)
        gap = statistics.median(cells[("direct", ("closed", 1), False)]["latencies_ms"])
        one = ("closed", 1)
        gate = {"router": statistics.median(cells[("llmroute-gate", one, False)]["gate_ms"]),
                "wait": statistics.mean(cells[(PAUSED, one, False)]["wait_ms"]),
                "paced": gate_p50_ms(gap, calls), "back_to_back": gate_p50_ms(0.0, calls)}
    result = report(cells, servers, gate, console, _modes.results_dir())
    result["cpu_latency_qos_held"] = idle.startswith("held")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
