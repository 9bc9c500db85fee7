"""Request metrics after real traffic (counts, GenAI histograms, tokens, gate time,
per-backend signal gauges), bounded label values, and the per-request log line."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.types import EngineSignals

CHAT = "/v1/chat/completions"


def chat(content: str, stream: bool = False) -> dict[str, Any]:
    return {"model": "auto", "stream": stream, "messages": [{"role": "user", "content": content}]}


def series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")
            or line.startswith(name + " ")]


async def test_series_exist_after_traffic_and_labels_stay_bounded():
    async with serve_upstream(["ok"]) as up, \
            open_router(make_config([{"id": "a", "pool": "general",
                                      "base_url": up.base_url}])) as (rt, client):
        rt.signals.record_ok("a", EngineSignals(rt.clock(), "vllm", running=2, waiting=3,
                                                kv_cache_usage=0.25,
                                                gpu_mem_free_bytes=1 << 30), rt.clock())
        for i in range(12):
            await client.post(CHAT, json=chat(f"secret prompt {i}", stream=i % 2 == 0),
                              headers={"x-request-id": f"unique-{i}"})
        text = (await client.get("/metrics")).text
    requests = series(text, "llmroute_requests_total")
    assert len(requests) == 1, requests  # 12 ids and prompts, one label set
    for label in ('pool="general"', 'backend="a"', 'status="200"', 'intent="',
                  'strategy="builtin-single@'):
        assert label in requests[0]
    assert requests[0].endswith(" 12.0")
    for name in ("gen_ai_server_request_duration_seconds_count",
                 "gen_ai_server_time_to_first_token_seconds_count",
                 "gen_ai_server_time_per_output_token_seconds_count",
                 "llmroute_gate_duration_seconds_count"):
        assert series(text, name), name
    assert 'gen_ai_token_type="input"' in text and 'gen_ai_token_type="output"' in text
    ttft = series(text, "gen_ai_server_time_to_first_token_seconds_count")
    assert ttft[0].endswith(" 6.0")  # the streamed half
    assert 'llmroute_backend_queue{backend="a"} 3.0' in text
    assert 'llmroute_backend_running{backend="a"} 2.0' in text
    assert 'llmroute_backend_kv_cache_usage{backend="a"} 0.25' in text
    assert 'llmroute_backend_gpu_free_bytes{backend="a"} 1.073741824e+09' in text
    assert 'llmroute_backend_in_flight{backend="a"} 0.0' in text
    assert "unique-" not in text and "secret" not in text


async def test_one_log_line_per_request_without_prompt_text():
    async with serve_upstream(["ok"]) as up, \
            open_router(make_config([{"id": "a", "pool": "general",
                                      "base_url": up.base_url}])) as (_, client):
        with capture_logs() as logs:
            await client.post(CHAT, json=chat("secret words"), headers={"x-request-id": "l1"})
    lines = [e for e in logs if e["event"] == "request"]
    assert len(lines) == 1
    line = lines[0]
    assert line["request_id"] == "l1" and line["backend"] == "a" and line["pool"] == "general"
    assert line["status"] == 200 and line["tokens_out"] == 5 and line["handoffs"] == 0
    assert {"intent", "strategy", "duration_ms", "ttft_ms", "tokens_in"} <= set(line)
    assert "secret" not in str(line)


async def test_log_prompts_adds_the_prompt_and_answer():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          observe={"log_prompts": True})
        async with open_router(cfg) as (_, client):
            with capture_logs() as logs:
                await client.post(CHAT, json=chat("secret words", stream=True))
    line = next(e for e in logs if e["event"] == "request")
    assert "secret words" in line["prompt"] and line["answer"] == "Hello from the fake engine."
