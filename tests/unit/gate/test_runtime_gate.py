"""The router's default gate is the semantic one, started by ``open_runtime`` without
blocking the event loop; the request path and ``/debug/route`` use it, and ``/metrics``
serves its failure counter."""

from __future__ import annotations

import asyncio
import itertools
import time

from pathlib import Path

import httpx
import pytest
from fakes.router import make_config

from llmroute.api.app import create_app
from llmroute.gate import semantic
from llmroute.gate.compress import prompt_request
from llmroute.gate.semantic import SemanticGate
from llmroute.assemble.runtime import open_runtime


async def test_open_runtime_starts_the_semantic_gate_off_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(semantic, "heads_dir", lambda _: tmp_path)  # no stored heads: a fit
    config = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    ticks: list[float] = []

    async def heartbeat() -> None:
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.05)

    beat = asyncio.create_task(heartbeat())
    async with open_runtime(config) as rt:
        beat.cancel()
        assert isinstance(rt.gate, SemanticGate) and rt.gate.ready
        gaps = [b - a for a, b in itertools.pairwise(ticks)]
        assert len(ticks) > 5 and max(gaps) < 1.0  # the loop kept running during the fit
        transport = httpx.ASGITransport(app=create_app(config, runtime=rt))
        async with httpx.AsyncClient(transport=transport, base_url="http://router") as client:
            body = (await client.get("/debug/route", params={"query": "把这句话翻译成英文"})).json()
            served = (await client.get("/metrics")).text
    assert body["intent"]["label"] == "translation"
    assert body["intent"]["source"].startswith("fast")
    assert 'llmroute_gate_failures_total{stage="encoder"} 0.0' in served


async def test_debug_route_never_shows_the_encoders_vector(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the encoder asked for every prompt the verdict carries its embedding (for the
    answer cache); ``/debug/route`` still answers JSON, without the vector."""
    monkeypatch.setattr(semantic, "heads_dir", lambda _: tmp_path)
    config = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}],
                         gate={"second_opinion_below": 1.0})
    async with open_runtime(config) as rt:
        intent = await rt.gate.classify(prompt_request("hello, how are you today"))
        assert intent.embedding is not None and intent.source.startswith("fast+encoder")
        transport = httpx.ASGITransport(app=create_app(config, runtime=rt))
        async with httpx.AsyncClient(transport=transport, base_url="http://router") as client:
            resp = await client.get("/debug/route", params={"query": "hello, how are you today"})
    assert resp.status_code == 200
    assert resp.json()["intent"]["source"].startswith("fast+encoder")
    assert "embedding" not in resp.json()["intent"]
