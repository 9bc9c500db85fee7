"""``llmroute_fuse_mean_entropy_nats{backend}``: the mean per-token entropy of a backend's
recent streamed legs, from the logprobs the fuse reads (scripted upstream: peaked tokens
≈ 0.072 nats, flat ones ln 50 ≈ 3.9 nats)."""

from __future__ import annotations

import math

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from prometheus_client.parser import text_string_to_metric_families

from llmroute.fuse.entropy import entropy_nats
from llmroute.observe.metrics import EntropyMeans

PEAKED = entropy_nats([math.log(0.99)] + [math.log(0.002)] * 4)


def gauge(text: str) -> dict[str, float]:
    return {s.labels["backend"]: s.value for f in text_string_to_metric_families(text)
            if f.name == "llmroute_fuse_mean_entropy_nats" for s in f.samples}


async def test_a_backend_s_streams_set_its_mean_entropy_and_a_disarmed_one_sets_none():
    async with serve_upstream(["ok"], "one two three four") as a, \
            serve_upstream(["ok"], "one two three four") as b:
        cfg = make_config([{"id": "armed", "pool": "p", "base_url": a.base_url},
                           {"id": "off", "pool": "q", "engine": "ollama",
                            "base_url": b.base_url}])
        async with open_router(cfg) as (_, client):
            for model in ("p", "p", "q"):
                r = await client.post("/v1/chat/completions", json={
                    "model": model, "stream": True,
                    "messages": [{"role": "user", "content": "Count."}]})
                assert r.status_code == 200
            values = gauge((await client.get("/metrics")).text)
    assert values.keys() == {"armed"}  # ollama: no logprobs, no entropy
    assert values["armed"] == pytest.approx(PEAKED, rel=1e-6)


def test_the_mean_moves_by_each_leg_s_weight():
    means = EntropyMeans()
    means.add("b", 4.0, 2)
    assert means.means["b"] == 2.0
    means.add("b", 12.0, 3)
    assert means.means["b"] == pytest.approx(2.0 + EntropyMeans.ALPHA * (4.0 - 2.0))
