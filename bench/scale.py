"""Scale-out benchmark, shared state: what a Redis-backed limit check costs and whether a
fleet of replicas keeps a limit exact.

A real ``redis-server`` (Debian's package, started here on a free loopback port, no
persistence) serves every store. Measured in one run:

* ``redis_added_p50_ms``: the p50 of one admission check (``reserve`` of the charges of a
  key and its tenant with RPM and TPM: four limits, one call) through Redis minus the same
  in-process (``MemoryStore``), one client, back to back. Target ≤ 0.3 ms on loopback.
* ``limiter_cpu_us_per_request``: this process's CPU (``time.process_time``) per admitted
  request through the limiter (``Limiter.admit`` then ``Ticket.settle`` with usage below
  the reservation; a key with ``rpm`` and ``max_concurrency``, as the workers run below
  uses), in-process and on Redis, one client back to back: what the limits' Redis calls
  cost the router (one EVALSHA in, one out), measured apart from the HTTP path.
* the fleet past this machine: N = 8, 32, 128 replicas simulated as N store instances (each
  with its own connection pool, as a replica has) in this process, 200 concurrent clients
  spread round-robin over them, all on one key with ``rpm: 60``, several rounds. Per N:
  admitted beyond the limit (after what refilled during the round), Redis commands per
  request (``INFO commandstats``: the EVALSHA and the commands its script runs; one round
  trip per check) and the p99 of the check's latency (connections already open: a warm-up
  round is not counted; the 200 clients share this process's one core, so it includes
  their own queueing). ``fleet_rpm_overshoot_max`` is the worst over every N and round
  (target ≤ 1).
* ``breaker_propagation_ms_p95``: three replicas (each a circuit breaker and its
  ``state/breakers.py`` sharing, own Redis connections) in this process; one opens a
  backend's breaker, and the time until the other two read it open from their local copy
  is taken, many times over fresh backends (target ≤ 1000 ms; one PUBLISH on loopback).
* ``metrics_polls_per_interval``: N = 1 and 3 replicas' signal collectors (each its own
  Redis client and ``state/polls.py`` sharing) poll one engine every 50 ms for a few
  seconds; the engine's polls per interval with the per-engine poll lease, beside N ×
  independent polling (each collector alone: N per interval).
* ``workers_2_cpu_efficiency`` (target ≥ 0.85): requests served per second of router CPU
  with ``serve --workers 2`` on Redis state against one process on in-process state, with
  raw throughput beside it (``bench/lib/workers_cpu.py``).
* ``prefix_share_round_trips_per_request`` (target ≤ 1): three replicas share their prefix
  indexes (``state/prefix.py``) while 100 requests a second are dispatched over them; Redis
  round trips (one per exchange, every 100 ms per replica; none on the request path) and
  commands per request, and the share of the records every replica has learned
  (``bench/lib/prefix_share.py``).
* ``redis_outage_failed_requests`` (target 0) beside ``redis_outage_requests``: two real
  replicas on Redis state under a closed-loop load; Redis is killed (SIGKILL) mid-load and
  started again on its port after 1 s; every request that did not answer 200 over the whole
  run counts (``bench/lib/redis_outage.py``). It kills the Redis, so it runs last.

``python bench/scale.py [--quick | --smoke] [--only workers|outage]``; the last line is
``RESULT {json}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench" / "lib"))
sys.path.insert(0, str(ROOT))

import redis.asyncio as aioredis  # noqa: E402
from redis.utils import HIREDIS_AVAILABLE  # noqa: E402
from fakes.redis import MISSING, RedisServer, find_redis_server  # noqa: E402
from modes import mode, parser, pick, skip  # noqa: E402
from prefix_share import prefix_sharing  # noqa: E402
from redis_outage import redis_outage  # noqa: E402
from workers_cpu import workers_cpu_efficiency  # noqa: E402

from llmroute.anchor.collector import Collector  # noqa: E402
from llmroute.anchor.store import SignalStore  # noqa: E402
from llmroute.config import BreakerConfig  # noqa: E402
from llmroute.fuse.breaker import CircuitBreaker  # noqa: E402
from llmroute.config.policy import LimitsConfig  # noqa: E402
from llmroute.policy.auth import Caller  # noqa: E402
from llmroute.policy.keys import ApiKey, Limits, Tenant  # noqa: E402
from llmroute.policy.limits import Limiter  # noqa: E402
from llmroute.state.breakers import FleetBreakers  # noqa: E402
from llmroute.state.memory import MemoryStore  # noqa: E402
from llmroute.state.protocol import Bucket, Charge, StateStore  # noqa: E402
from llmroute.state.polls import SharedPolls  # noqa: E402
from llmroute.state.redis import RedisStore  # noqa: E402
from llmroute.types import (Backend, BreakerState, ChatRequest, EngineSignals,  # noqa: E402
                            Outcome)

RPM = 60
CLIENTS = 200


def check_charges(n: int) -> list[Charge]:
    """One request's charges on key ``n``: RPM and TPM of the key and of its tenant."""
    at = f"{{t{n}}}"
    return [Charge(Bucket(f"rpm:key:{at}:k", 1e9, 60.0), 1),
            Charge(Bucket(f"tpm:key:{at}:k", 1e12, 60.0), 500),
            Charge(Bucket(f"rpm:tenant:{at}", 1e9, 60.0), 1),
            Charge(Bucket(f"tpm:tenant:{at}", 1e12, 60.0), 500)]


async def check_p50_ms(store: StateStore, n: int) -> float:
    """p50 of ``n`` back-to-back checks on ``store`` (after 100 to warm up)."""
    charges = check_charges(0)
    times = []
    for i in range(n + 100):
        started = time.perf_counter()
        await store.reserve(charges)
        if i >= 100:
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def limiter_cpu_us(store: StateStore, n: int) -> float:
    """Microseconds of this process's CPU per admitted request through a Limiter over
    ``store`` (``n`` requests after 100 to warm up)."""
    limiter = Limiter(store, LimitsConfig(), time.time)
    who = Caller(ApiKey("key_b", "lr-bench", "t", limits=Limits(rpm=10**9,
                                                                  max_concurrency=10**6)),
                 Tenant("t"))
    request = ChatRequest("chat", {}, "auto", False, "hi", 20, 80, "r")
    for i in range(n + 100):
        if i == 100:
            started = time.process_time()
        await (await limiter.admit(who, request)).settle(90)
    return (time.process_time() - started) / n * 1e6


async def commands(url: str) -> int:
    """Commands Redis has run so far (``INFO commandstats``, without INFO itself)."""
    client = aioredis.Redis.from_url(url)
    stats = await client.info("commandstats")
    await client.aclose()
    return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")


async def fleet_round(stores: list[RedisStore], latencies: list[float]) -> float:
    """200 concurrent clients over the replicas on one ``rpm: 60`` key; the admitted
    beyond the limit and what refilled meanwhile."""
    bucket = Bucket(f"rpm:key:{{{uuid.uuid4().hex}}}:k", RPM, 60.0)

    async def one(i: int) -> bool:
        started = time.perf_counter()
        grant = await stores[i % len(stores)].reserve([Charge(bucket, 1)])
        latencies.append((time.perf_counter() - started) * 1000)
        return grant.allowed

    started = time.perf_counter()
    admitted = sum(await asyncio.gather(*(one(i) for i in range(CLIENTS))))
    refilled = int(bucket.rate * (time.perf_counter() - started))
    return max(admitted - RPM - refilled, 0)


async def fleet(url: str, n: int, rounds: int) -> dict[str, float]:
    """The fleet figures for ``n`` replicas."""
    stores = [RedisStore(url, 2.0, prefix="bench:", pool_size=64) for _ in range(n)]
    await fleet_round(stores, [])  # warm up: every replica opens its connections
    latencies: list[float] = []
    before = await commands(url)
    overshoot = [await fleet_round(stores, latencies) for _ in range(rounds)]
    ops = (await commands(url) - before) / (rounds * CLIENTS)
    for store in stores:
        await store.close()
    return {"overshoot_max": max(overshoot), "redis_ops_per_request": round(ops, 2),
            "check_p99_ms": round(statistics.quantiles(latencies, n=100)[98], 3)}


async def breaker_propagation_ms(url: str, opens: int) -> list[float]:
    """Milliseconds from one replica's local open until both others read it open, for
    ``opens`` fresh backends (module docstring)."""
    config = BreakerConfig(min_requests=1, failure_rate=1.0, cooldown_s=600)
    prefix = f"bench-breakers-{uuid.uuid4().hex}:"
    breakers = [CircuitBreaker(config, fleet_probes=True) for _ in range(3)]
    stores = [RedisStore(url, 2.0, prefix=prefix) for _ in breakers]
    sharing = [FleetBreakers(b, url, s, time.monotonic, prefix=prefix)
               for b, s in zip(breakers, stores)]
    out: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        for share in sharing:
            await stack.enter_async_context(share.run())
        await asyncio.sleep(0.3)  # subscribed
        for i in range(opens):
            started = time.monotonic()
            breakers[0].record(f"b{i}", Outcome.FAILURE, started)
            while not all(b.state(f"b{i}", time.monotonic()) is BreakerState.OPEN
                          for b in breakers[1:]):
                await asyncio.sleep(0.0005)
            out.append((time.monotonic() - started) * 1000)
    for store in stores:
        await store.close()
    return out


class CountingEngine:
    """A metrics source that counts its polls."""

    def __init__(self) -> None:
        self.polls = 0

    async def poll(self, backend: Backend, now: float) -> EngineSignals:
        """One poll: a fixed snapshot."""
        self.polls += 1
        return EngineSignals(taken_at=now, source="vllm", running=1, waiting=0)


async def polls_per_interval(url: str, replicas: int, seconds: float,
                             period_s: float = 0.05) -> float:
    """The engine's polls per ``period_s`` with ``replicas`` collectors sharing polls."""
    engine, prefix = CountingEngine(), f"polls{uuid.uuid4().hex[:8]}:"
    backend = Backend(id="e", base_url="http://127.0.0.1:9", model="m", pool="p",
                      engine="vllm", context_length=4096)
    clients = [aioredis.Redis.from_url(url) for _ in range(replicas)]
    collectors = [Collector({"e": (backend, engine)}, SignalStore(5.0), time.monotonic,
                            period_s=period_s, share=SharedPolls(r, period_s, prefix=prefix))
                  for r in clients]
    for c in collectors:
        c.start()
    await asyncio.sleep(0.5)  # warm: connections open, the lease taken
    before, started = engine.polls, time.monotonic()
    await asyncio.sleep(seconds)
    done = engine.polls - before
    elapsed = time.monotonic() - started
    for c in collectors:
        await c.stop()
    for r in clients:
        await r.aclose()
    return round(done / (elapsed / period_s), 3)


def outage(server: RedisServer, size: str) -> dict[str, object]:
    """``redis_outage_*`` (``bench/lib/redis_outage.py``), its line printed."""
    result = redis_outage(server, size)
    print(f"Redis killed mid-load for {result['redis_outage_down_s']} s: "
          f"{result['redis_outage_failed_requests']} failed of "
          f"{result['redis_outage_requests']} requests; by phase "
          f"{result['redis_outage_phases']}; replicas after: {result['redis_outage_replicas']}")
    return result


async def run(server: RedisServer, size: str) -> dict[str, object]:
    """Every measurement; prints the tables; returns the RESULT."""
    url = server.url
    n = pick(size, 5000, 500, 50)
    memory = await check_p50_ms(MemoryStore(time.monotonic), n)
    redis = RedisStore(url, 2.0, prefix="bench:")
    through_redis = await check_p50_ms(redis, n)
    await redis.close()
    print(f"admission check p50: in-process {memory:.4f} ms, Redis {through_redis:.4f} ms")
    redis = RedisStore(url, 2.0, prefix="bench-limiter:")
    cpu = {"memory": round(await limiter_cpu_us(MemoryStore(time.monotonic), n * 4), 1),
           "redis": round(await limiter_cpu_us(redis, n * 4), 1)}
    await redis.close()
    print(f"limiter CPU per admitted request (admit + settle): {cpu} µs")
    per_n = {}
    print(f"{'replicas':>8} {'overshoot':>9} {'ops/request':>11} {'p99 ms':>8}")
    for replicas in (8, 32, 128):
        per_n[replicas] = row = await fleet(url, replicas, pick(size, 10, 3, 1))
        print(f"{replicas:>8} {row['overshoot_max']:>9} {row['redis_ops_per_request']:>11} "
              f"{row['check_p99_ms']:>8}")
    spread = await breaker_propagation_ms(url, pick(size, 300, 50, 5))
    p95 = statistics.quantiles(spread, n=20)[18]
    print(f"breaker propagation to 2 other replicas: p50 {statistics.median(spread):.2f} ms, "
          f"p95 {p95:.2f} ms")
    workers = await asyncio.to_thread(workers_cpu_efficiency, url, size)
    print(f"workers: {workers}")
    polls = {str(n): await polls_per_interval(url, n, pick(size, 5.0, 2.0, 0.5))
             for n in (1, 3)}
    print(f"engine polls per 50 ms interval: {polls} (independent polling: N per interval)")
    shared = await prefix_sharing(url, 3, 100.0, pick(size, 6.0, 2.0, 0.5), commands)
    print(f"shared prefix index, 3 replicas at 100 requests/s: {shared}")
    killed = await asyncio.to_thread(outage, server, size)  # last: it loses Redis's data
    return {"redis_added_p50_ms": round(through_redis - memory, 4),
            "limiter_cpu_us_per_request": cpu,
            "redis_parser": "hiredis" if HIREDIS_AVAILABLE else "python",
            "metrics_polls_per_interval": polls,
            "metrics_polls_per_interval_independent": {"1": 1, "3": 3},
            **workers,
            "breaker_propagation_ms_p95": round(p95, 3),
            "check_p50_ms_memory": round(memory, 4), "check_p50_ms_redis": round(through_redis, 4),
            "fleet_rpm_overshoot_max": max(r["overshoot_max"] for r in per_n.values()),
            "fleet": {str(k): v for k, v in per_n.items()}, **shared, **killed}


def main() -> int:
    """Command line entry; returns the exit code."""
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["workers", "outage"], help="only this measurement "
                   "(workers: workers_2_cpu_efficiency and its rows; outage: "
                   "redis_outage_failed_requests and its counts)")
    args = p.parse_args()
    binary = find_redis_server()
    if binary is None:
        skip(f"scale: {MISSING}")
    size = mode(args)
    with tempfile.TemporaryDirectory() as work:
        server = RedisServer(binary, Path(work))
        server.start()
        try:
            if args.only == "workers":
                result = workers_cpu_efficiency(server.url, size)
            elif args.only == "outage":
                result = outage(server, size)
            else:
                result = asyncio.run(run(server, size))
        finally:
            server.stop()
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
