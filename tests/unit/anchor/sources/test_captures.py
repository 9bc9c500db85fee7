"""Every parser on real captures: values read by hand from the files (see SOURCE.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmroute.anchor.sources.dcgm import parse_dcgm
from llmroute.anchor.sources.llamacpp import merge, parse_llamacpp_metrics, parse_llamacpp_slots
from llmroute.anchor.sources.ollama import parse_ollama_ps
from llmroute.anchor.sources.sglang import parse_sglang_metrics
from llmroute.anchor.sources.vllm import parse_vllm_metrics

SHARED = Path("/work/shared/data/engine-metrics")
OURS = Path(__file__).resolve().parents[3] / "data" / "engine"
MIB = 1024 * 1024


def shared(name: str) -> str:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present")
    return (SHARED / name).read_text()


def ours(name: str) -> str:
    return (OURS / name).read_text()


VLLM = [  # file, running, waiting, kv, ttft p50/p95 ms, tpot p50 ms, prompt, generation
    ("vllm-v1-0.20.2rc1-metrics-scrape1.txt", 0, 0, 0.0, 500.0, 4750.0, 41.667, 32, 16),
    ("vllm-v1-0.20.2rc1-metrics-scrape2.txt", 0, 0, 0.0, 437.5, 4625.0, 40.0, 48, 24),
    ("vllm-v1-0.20.2rc1-metrics-scrape3.txt", 1, 0, 0.38235294117647056, 375.0, 4500.0,
     38.889, 71, 40),
    ("vllm-v1-kops-qwen2.5-0.5b-metrics-idle.txt", 0, 0, 0.0, None, None, None, 0, 0),
    ("vllm-v0-0.5.0-datadog-opt-125m-metrics.txt", 0, 0, 0.0, 375.0, 487.5, 37.5, 5, 7),
    ("vllm-v0-aibrix-docs-qwen2.5-coder-1.5b-metrics-partial.txt", 0, 0, 0.0,
     None, None, None, 148, 955),
]


@pytest.mark.parametrize("name,run,wait,kv,p50,p95,tpot,prompt,gen", VLLM,
                         ids=[row[0] for row in VLLM])
def test_vllm_captures(name, run, wait, kv, p50, p95, tpot, prompt, gen):
    s = parse_vllm_metrics(shared(name), 7.0)
    assert (s.running, s.waiting, s.prompt_tokens_total, s.generation_tokens_total) == (
        run, wait, prompt, gen)
    assert s.kv_cache_usage == pytest.approx(kv)
    for got, want in [(s.ttft_p50_ms, p50), (s.ttft_p95_ms, p95), (s.tpot_p50_ms, tpot)]:
        assert got == (None if want is None else pytest.approx(want, abs=1e-3))
    assert s.taken_at == 7.0 and s.source == "vllm"


def test_vllm_v0_uses_old_kv_name_and_v1_the_new_one():
    v0 = shared("vllm-v0-0.5.0-datadog-opt-125m-metrics.txt")
    v1 = shared("vllm-v1-0.20.2rc1-metrics-scrape3.txt")
    assert "vllm:gpu_cache_usage_perc" in v0 and "vllm:kv_cache_usage_perc" not in v0
    assert "vllm:gpu_cache_usage_perc" not in v1
    assert parse_vllm_metrics(v1, 0).kv_cache_usage == pytest.approx(13 / 34)


@pytest.mark.parametrize("name,blocks", [
    ("vllm-v1-0.20.2rc1-metrics-scrape1.txt", 35),  # 13 of 34 usable blocks in use, above
    ("vllm-v1-kops-qwen2.5-0.5b-metrics-idle.txt", 101625),
    ("vllm-v0-0.5.0-datadog-opt-125m-metrics.txt", 7281),
    ("vllm-v0-aibrix-docs-qwen2.5-coder-1.5b-metrics-partial.txt", 81767),
])
def test_vllm_kv_capacity_is_blocks_times_block_size(name, blocks):
    assert parse_vllm_metrics(shared(name), 0).kv_capacity_tokens == blocks * 16


@pytest.mark.parametrize("labels", ['num_gpu_blocks="None",block_size="16"',
                                    'num_gpu_blocks="-4",block_size="16"',
                                    'block_size="16"', 'num_gpu_blocks="35",block_size="x"'])
def test_vllm_kv_capacity_without_usable_labels_is_missing(labels):
    text = f"vllm:cache_config_info{{{labels}}} 1.0\nvllm:num_requests_running 2\n"
    s = parse_vllm_metrics(text, 0)
    assert s.kv_capacity_tokens is None and "kv_capacity_tokens" in s.missing
    assert s.running == 2


def test_vllm_empty_histograms_are_missing_not_zero():
    s = parse_vllm_metrics(shared("vllm-v1-kops-qwen2.5-0.5b-metrics-idle.txt"), 0)
    assert s.missing == ("ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms")


def test_sglang_loaded_docs_capture():
    s = parse_sglang_metrics(shared("sglang-v0.3-docs-llama3.1-8b-metrics-loaded.txt"), 0)
    assert (s.running, s.waiting) == (162, 2826)
    assert s.kv_cache_usage == pytest.approx(0.28)
    assert s.gen_throughput_tps == pytest.approx(86.50814177726902)
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (8_128_902, 7_557_572)
    # 8495 of 11008 TTFTs are above the last finite bucket (30 s): the estimate caps there.
    assert (s.ttft_p50_ms, s.ttft_p95_ms) == (30_000.0, 30_000.0)
    assert s.missing == ()


def test_sglang_curated_tp_rank_capture():
    s = parse_sglang_metrics(shared("sglang-v0.5.10.post1-datadog-curated-metrics.txt"), 0)
    assert (s.running, s.waiting, s.kv_cache_usage, s.gen_throughput_tps) == (0, 0, 0.25, 425.5)
    assert s.ttft_p50_ms == pytest.approx(50.0) and s.ttft_p95_ms == pytest.approx(95.0)
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (5, 32)


LLAMA_METRICS = [  # reader, file, running, waiting, prompt, predicted
    (shared, "llamacpp-b9014-metrics-idle.txt", 0, 0, 0, 0),
    (shared, "llamacpp-b9014-metrics-busy.txt", 1, 0, 65, 8),
    (ours, "llamacpp-local-metrics-idle.txt", 0, 0, 0, 0),
    (ours, "llamacpp-local-metrics-busy.txt", 1, 0, 39, 0),  # counters lag until done
]


@pytest.mark.parametrize("read,name,run,wait,prompt,gen", LLAMA_METRICS,
                         ids=[row[1] for row in LLAMA_METRICS])
def test_llamacpp_metrics_captures(read, name, run, wait, prompt, gen):
    s = parse_llamacpp_metrics(read(name), 0)
    assert (s.running, s.waiting, s.prompt_tokens_total, s.generation_tokens_total) == (
        run, wait, prompt, gen)
    assert s.kv_cache_usage is None and s.missing == ("kv_cache_usage",)


LLAMA_SLOTS = [  # reader, file, idle, total
    (shared, "llamacpp-b9014-slots-idle.json", 1, 1),
    (shared, "llamacpp-b9014-slots-busy.json", 0, 1),
    (shared, "llamacpp-slots-readme-example.json", 0, 2),
    (ours, "llamacpp-local-slots-idle.json", 2, 2),
    (ours, "llamacpp-local-slots-busy.json", 1, 2),
]


@pytest.mark.parametrize("read,name,idle,total", LLAMA_SLOTS, ids=[r[1] for r in LLAMA_SLOTS])
def test_llamacpp_slots_captures(read, name, idle, total):
    s = parse_llamacpp_slots(read(name), 0)
    assert (s.idle_slots, s.total_slots, s.missing) == (idle, total, ())


def test_llamacpp_merge_of_local_busy_polls():
    m = parse_llamacpp_metrics(ours("llamacpp-local-metrics-busy.txt"), 10.0)
    s = parse_llamacpp_slots(ours("llamacpp-local-slots-busy.json"), 9.5)
    both = merge(m, s)
    assert (both.running, both.idle_slots, both.total_slots) == (1, 1, 2)
    assert both.taken_at == 9.5 and both.source == "llamacpp"
    assert both.missing == ("kv_cache_usage",)


OLLAMA = [
    ("ollama-api-ps-docs.json", (("mistral:latest", 5_137_025_024),)),
    ("ollama-api-ps-openapi-example.json", (("gemma4", 5_333_539_264),)),
]


@pytest.mark.parametrize("name,models", OLLAMA, ids=[r[0] for r in OLLAMA])
def test_ollama_ps_captures(name, models):
    s = parse_ollama_ps(shared(name), 0)
    assert s.loaded_models == models and s.missing == ()
    assert s.running is None and s.kv_cache_usage is None  # no such signals from Ollama


DCGM = [  # file, free MiB (used 0 and util 0 in all three idle captures)
    # file, free MiB, °C (GPU_TEMP), memory bandwidth (DRAM_ACTIVE, else MEM_COPY_UTIL / 100)
    ("dcgm-exporter-nvidia-l4-580.105.08-metrics.txt", 22563, 31.0, 0.0),
    ("dcgm-exporter-nvidia-l40s-595.58.03-metrics.txt", 45459, 32.0, 0.000131),
    ("dcgm-exporter-grid-a100-40c-vgpu-580.126.09-metrics.txt", 37739, None, 0.0),
]


@pytest.mark.parametrize("name,free_mib,celsius,bandwidth", DCGM, ids=[r[0] for r in DCGM])
def test_dcgm_captures(name, free_mib, celsius, bandwidth):
    s = parse_dcgm(shared(name), 0)
    assert (s.gpu_mem_used_bytes, s.gpu_mem_free_bytes, s.gpu_util) == (0, free_mib * MIB, 0.0)
    assert (s.gpu_temp_c, s.gpu_mem_bw_util) == (celsius, pytest.approx(bandwidth))
    assert s.rejected == () and ("gpu_temp_c" in s.missing) == (celsius is None)
    assert parse_dcgm(shared(name), 0, gpu="0") == s
    assert parse_dcgm(shared(name), 0, gpu="7").missing == (
        "gpu_mem_used_bytes", "gpu_mem_free_bytes", "gpu_util", "gpu_temp_c",
        "gpu_mem_bw_util")
