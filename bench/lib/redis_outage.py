"""``redis_outage_failed_requests`` for ``bench/scale.py``: requests that failed while the
shared Redis was killed mid-load and started again.

Two real ``llmroute serve`` replicas (each its own process and port) share the Redis with
``state: {kind: redis}`` (defaults otherwise: limits fail open, ``retry_s`` 1 s), auth on and
one key with limits (``rpm`` and ``max_concurrency``, high enough never to refuse), the gate
off, one ``openai`` backend at the fast scripted upstream (``workers_cpu.upstream``). One
closed-loop load generator per replica (``loadgen.py``, its own process, 8 clients each, no
warm-up: every request counts) runs for a few seconds; after ``lead_s`` the Redis is killed
(SIGKILL: its data is lost) and after ``DOWN_S`` started again on the same port (empty), and
the load goes on until past its return. Every request that did not answer 200 (a non-2xx
status or a connection error) counts as failed over the whole run. The load generators
stamp each request's end, so the requests that ended before the kill, while Redis was down
(kill to its first PONG) and after it are reported apart; each replica's ``/metrics``
(``llmroute_state_up``, ``llmroute_state_outages_total``) at the end tells whether it saw
the outage and uses Redis again.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from fakes.fleet import ADMIN_KEY, create_key, fleet_config
from fakes.redis import RedisServer

import procs
from modes import pick
from workers_cpu import serve, upstream

LIB = Path(__file__).resolve().parent
DOWN_S = 1.0
"""Seconds Redis stays dead before it is started again."""
CLIENTS = 8
"""Closed-loop clients per replica."""


def _load(server: procs.Server, key: str, seconds: float) -> subprocess.Popen[str]:
    """A load generator on ``server`` for ``seconds`` (started, not waited for)."""
    spec = {"url": server.url + "/v1/chat/completions", "key": key, "stream": False,
            "mode": "closed", "clients": CLIENTS, "duration_s": seconds, "warmup_s": 0.0,
            "model": "auto", "stamps": True}
    return subprocess.Popen([sys.executable, str(LIB / "loadgen.py"), json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _state_metrics(server: procs.Server) -> dict[str, float]:
    """The replica's ``llmroute_state_up`` and ``llmroute_state_outages_total``."""
    text = httpx.get(server.url + "/metrics", timeout=5,
                     headers={"authorization": f"Bearer {ADMIN_KEY}"}).text
    found = {}
    for name in ("llmroute_state_up", "llmroute_state_outages_total"):
        match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
        found[name] = float(match.group(1)) if match else -1.0
    return found


def _outage(redis: RedisServer, replicas: list[procs.Server], key: str, seconds: float,
            lead_s: float) -> dict[str, Any]:
    """The load on every replica with the outage inside it; the counts (module docstring)."""
    loads = [_load(r, key, seconds) for r in replicas]
    time.sleep(lead_s)
    killed = time.time()
    redis.kill()
    time.sleep(DOWN_S)
    redis.start()
    back = time.time()
    outs = []
    for load in loads:
        stdout, stderr = load.communicate(timeout=seconds + 60)
        if load.returncode != 0:
            raise RuntimeError(f"load generator failed: {stderr[-2000:]}")
        outs.append(json.loads(stdout))
    ends = [e for out in outs for e in out["ends"]]
    latencies = [x for out in outs for x in out["latencies_ms"]]

    def phase(lo: float, hi: float) -> dict[str, int]:
        during = [ok for at, ok in ends if lo <= at < hi]
        return {"requests": len(during), "failed": during.count(False)}
    return {"redis_outage_failed_requests": sum(out["errors"] for out in outs),
            "redis_outage_requests": sum(out["served"] for out in outs),
            "redis_outage_down_s": round(back - killed, 3),
            "redis_outage_phases": {"before": phase(0, killed), "down": phase(killed, back),
                                    "after": phase(back, float("inf"))},
            "redis_outage_latency_ms": {
                "p50": round(statistics.median(latencies), 2) if latencies else None,
                "max": round(max(latencies), 2) if latencies else None}}


def redis_outage(redis: RedisServer, size: str) -> dict[str, Any]:
    """The measurement (module docstring) on ``redis`` (killed and restarted on its port:
    run it after anything that needs Redis's data) at run size ``size``. The load lasts 6 s
    (full run 10 s, smoke 3.5 s), the kill comes 2 s (4 s, 1 s) after the load generators
    start."""
    seconds, lead_s = pick(size, (10.0, 4.0), (6.0, 2.0), (3.5, 1.0))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with upstream(work) as up:
            config = fleet_config(work, redis.url, [{"id": "a", "base_url": up.url}],
                                  server={"drain_timeout_s": 2})
            key = create_key(config, "--rpm", "100000000", "--max-concurrency", "100000")
            replicas: list[procs.Server] = []
            try:
                for i in range(2):
                    replicas.append(serve(f"replica-{i}", config, work))
                result = _outage(redis, replicas, key, seconds, lead_s)
                result["redis_outage_replicas"] = {
                    r.name: _state_metrics(r) for r in replicas}
            finally:
                for r in replicas:
                    r.stop()
    return result
