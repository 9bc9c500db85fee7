"""bench/lib/policies.py: the ``llmroute-policies`` path of bench/overhead.py — its config,
key store and word list load, and requests with its key go through every policy step."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

from fakes.router import open_router
from fakes.upstream import serve_upstream

from llmroute.config import load_config

ROOT = Path(__file__).resolve().parents[3]
CHAT = "/v1/chat/completions"


def _policies():
    spec = importlib.util.spec_from_file_location("bench_policies",
                                                  ROOT / "bench" / "lib" / "policies.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_word_list_is_deterministic_distinct_and_misses_the_bench_texts():
    pol = _policies()
    first = pol.words()
    assert first == pol.words() and len(set(first)) == pol.WORDS == 10_000
    assert not any(w in pol.TEXTS for w in first)


async def test_one_request_with_the_key_goes_through_every_policy(tmp_path, monkeypatch):
    pol = _policies()
    monkeypatch.setenv(pol.ADMIN_ENV, pol.ADMIN_KEY)
    async with serve_upstream(["Hello from the fake engine."] * 4) as up:
        path, key = await asyncio.to_thread(pol.setup, tmp_path, up.base_url)
        config = load_config(path)
        assert config.auth.enabled and len(config.content_filter.lists) == 1
        async with open_router(config) as (rt, client):
            assert rt.policy is not None and rt.content_filter is not None
            auth = {"authorization": f"Bearer {key}"}
            body = {"model": "bench", "messages": [
                {"role": "user", "content": "Say hello to the benchmark. #12345678-0"}]}
            ok = await client.post(CHAT, json=body, headers=auth)
            assert ok.status_code == 200, ok.text
            assert ok.json()["choices"][0]["message"]["content"]
            streamed = await client.post(CHAT, json={**body, "stream": True}, headers=auth)
            assert streamed.status_code == 200 and "[DONE]" in streamed.text
            assert (await client.post(CHAT, json=body)).status_code == 401
            word = pol.words()[-1]
            blocked = await client.post(CHAT, headers=auth, json={**body, "messages": [
                {"role": "user", "content": f"tell me about {word}"}]})
            assert blocked.status_code == 400
            assert blocked.json()["error"]["code"] == "content_filter"


def test_the_report_prices_the_policies_path_against_plain_llmroute():
    spec = importlib.util.spec_from_file_location("bench_overhead_report",
                                                  ROOT / "bench" / "lib" / "overhead_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    one, sixteen = ("closed", 1), ("closed", 16)
    rows = {("llmroute", one, False): {"added_p50": 0.4, "rps": 900.0},
            ("llmroute", sixteen, False): {"added_p50": 1.0, "rps": 2000.0},
            ("llmroute-policies", one, False): {"added_p50": 0.7, "rps": 800.0},
            ("llmroute-policies", sixteen, False): {"added_p50": 1.5, "rps": 1800.0}}
    assert report._versus_llmroute(rows, "llmroute-policies", "policies") == {"policies_throughput_ratio": 0.9,
        "added_p50_ms_policies": 0.7, "added_p50_ms_policies_vs_llmroute": 0.3}
    assert report._versus_llmroute({k: v for k, v in rows.items() if k[0] == "llmroute"},
                                   "llmroute-policies", "policies") == {}
