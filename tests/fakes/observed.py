"""A router with something to observe: two scripted upstreams in pool ``general`` — ``cutter``
drops every stream after two chunks (so streams it starts are handed off, and its breaker
may open) and ``steady`` answers — behind the real app served by uvicorn on loopback, with
engine signals planted for both (fresh for an hour). ``send_traffic`` sends streamed and
plain requests until at least one handoff happened."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import httpx

from fakes.router import make_config
from fakes.upstream import serve_upstream
from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from llmroute.assemble.runtime import make_backends, wire
from llmroute.runtime import Runtime
from llmroute.types import EngineSignals

BACKENDS = ("cutter", "steady")


def plant_signals(rt: Runtime) -> None:
    """Engine signals for both backends, as a poll of their ``/metrics`` would give."""
    for i, bid in enumerate(BACKENDS):
        rt.signals.record_ok(bid, EngineSignals(rt.clock(), "vllm", running=1 + i, waiting=i,
                                                kv_cache_usage=0.3 + 0.4 * i,
                                                gpu_mem_free_bytes=(4 - i) << 30), rt.clock())


@contextlib.asynccontextmanager
async def observed_router() -> AsyncIterator[tuple[Runtime, str]]:
    """The router over the two upstreams, served on a free loopback port: ``(rt, url)``."""
    async with serve_upstream([("cut", 2)], "The quick brown fox") as cutter, \
            serve_upstream(["ok"], " jumps over the lazy dog.") as steady, \
            aiohttp.ClientSession() as session:
        config = make_config([{"id": "cutter", "pool": "general", "base_url": cutter.base_url},
                              {"id": "steady", "pool": "general", "base_url": steady.base_url}],
                             anchor={"stale_after_s": 3600})
        rt = wire(config, make_backends(config, {}), session)
        plant_signals(rt)
        async with serve_in_background(create_app(config, runtime=rt)) as url:
            yield rt, url


async def send_traffic(url: str, rounds: int = 12) -> list[str]:
    """Streamed and plain chat requests (ids ``req-0`` …), at least one of them handed off
    (more rounds until one is, up to 60); returns the ids of the handed-off ones."""
    handed: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for i in range(60):
            if i >= rounds and handed:
                break
            stream = i % 3 != 2
            body = {"model": "auto", "stream": stream,
                    "messages": [{"role": "user", "content": f"Tell me a story {i}"}]}
            await client.post("/v1/chat/completions", json=body,
                              headers={"x-request-id": f"req-{i}"})
            trace = (await client.get(f"/trace/req-{i}")).json()
            if trace.get("handoffs"):
                handed.append(f"req-{i}")
    return handed
