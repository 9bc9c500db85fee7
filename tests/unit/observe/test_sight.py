"""How well the router sees each backend, on ``/metrics``: the age of its signals, whether
it is dark or hot, its pool (the info series the pool-dark alert joins on) and the readings
rejected as nonsense."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from fakes.router import make_config, open_router
from llmroute.types import EngineSignals


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


async def test_age_dark_hot_info_and_rejected_readings_are_exported():
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"},
                       {"id": "b", "pool": "general", "base_url": "http://127.0.0.1:9"},
                       {"id": "h", "pool": "hosted", "engine": "openai", "model": "m",
                        "base_url": "http://127.0.0.1:9"}])
    async with open_router(cfg) as (rt, client):
        now = rt.clock()
        rt.signals.record_ok("a", EngineSignals(now - 1.5, "dcgm", gpu_temp_c=81.0,
                                                rejected=("gpu_mem_bw_util",)), now)
        rt.signals.record_ok("b", EngineSignals(now, "vllm", waiting=0), now)
        rt.signals.record_failure("b", "GET http://127.0.0.1:9/metrics: refused", now)
        got = samples((await client.get("/metrics")).text)
    dark = {b: got[("llmroute_backend_dark", (("backend", b),))] for b in "abh"}
    assert dark == {"a": 0.0, "b": 1.0, "h": 0.0}
    assert got[("llmroute_backend_hot", (("backend", "a"),))] == 1.0
    assert got[("llmroute_backend_gpu_temp_celsius", (("backend", "a"),))] == 81.0
    assert 1.5 <= got[("llmroute_backend_signals_age_seconds", (("backend", "a"),))] < 5
    assert ("llmroute_backend_signals_age_seconds", (("backend", "h"),)) not in got
    assert got[("llmroute_backend_info", (("backend", "h"), ("engine", "openai"),
                                          ("pool", "hosted")))] == 1.0
    assert got[("llmroute_backend_signal_rejected_total",
                (("backend", "a"), ("signal", "gpu_mem_bw_util")))] == 1.0
