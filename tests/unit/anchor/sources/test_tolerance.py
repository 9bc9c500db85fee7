"""Bad input never raises: it yields None signals named in ``missing``. Plus invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.anchor.sources import prom
from llmroute.anchor.sources.dcgm import parse_dcgm
from llmroute.anchor.sources.llamacpp import parse_llamacpp_metrics, parse_llamacpp_slots
from llmroute.anchor.sources.ollama import parse_ollama_ps
from llmroute.anchor.sources.sglang import parse_sglang_metrics
from llmroute.anchor.sources.signals import FRACTIONS, SIGNALS, signal_names
from llmroute.anchor.sources.vllm import parse_vllm_metrics
from llmroute.types import EngineSignals

TEXT_PARSERS = {"vllm": parse_vllm_metrics, "sglang": parse_sglang_metrics,
                "llamacpp": parse_llamacpp_metrics, "dcgm": parse_dcgm}
JSON_PARSERS = {"slots": parse_llamacpp_slots, "ollama": parse_ollama_ps}
ALL = {**TEXT_PARSERS, **JSON_PARSERS}

GOOD_VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 2.0
vllm:num_requests_running{engine="1"} 3.0
vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:kv_cache_usage_perc{engine="1"} 0.25
"""


BAD_TEXT = [
    ("garbage", "hello world\nthis is not prometheus"),
    ("truncated-mid-line", GOOD_VLLM + 'vllm:num_requests_waiting{engine="0'),
    ("empty", ""),
    ("nul", "\x00\x01"),
    ("html", "<html><body>502 Bad Gateway</body></html>"),
    ("json", '{"error": "not found"}'),
]


@pytest.mark.parametrize("kind", list(ALL), ids=list(ALL))
@pytest.mark.parametrize("text", [t for _, t in BAD_TEXT], ids=[i for i, _ in BAD_TEXT])
def test_bad_body_gives_everything_missing(kind, text):
    s = ALL[kind](text, 3.0)
    assert all(getattr(s, n) is None for n in SIGNALS)
    assert s.missing and s.taken_at == 3.0


def test_sums_across_engines_and_averages_fractions():
    s = parse_vllm_metrics(GOOD_VLLM, 0)
    assert (s.running, s.kv_cache_usage) == (5, 0.375)
    assert "waiting" in s.missing and "running" not in s.missing


BAD_VALUES = [
    ("nan-gauge", "vllm:num_requests_running NaN", "running"),
    ("inf-gauge", "vllm:num_requests_running +Inf", "running"),
    ("negative-gauge", "vllm:num_requests_waiting -1", "waiting"),
    ("one-bad-label-set", 'vllm:num_requests_running{engine="0"} 1\n'
                          'vllm:num_requests_running{engine="1"} NaN', "running"),
    ("kv-above-one", "vllm:kv_cache_usage_perc 1.5", "kv_cache_usage"),
    ("kv-nan", "vllm:gpu_cache_usage_perc NaN", "kv_cache_usage"),
    ("counter-negative", "vllm:prompt_tokens_total -5", "prompt_tokens_total"),
]


@pytest.mark.parametrize("text,name", [(t, n) for _, t, n in BAD_VALUES],
                         ids=[i for i, _, _ in BAD_VALUES])
def test_bad_value_is_missing(text, name):
    s = parse_vllm_metrics(text + "\n", 0)
    assert getattr(s, name) is None and name in s.missing


def hist(lines: list[str], count: str | None = None) -> str:
    body = "".join(f'vllm:time_to_first_token_seconds_bucket{{le="{le}"}} {c}\n'
                   for le, c in (x.split() for x in lines))
    return body + (f"vllm:time_to_first_token_seconds_count {count}\n" if count else "")


BAD_HISTOGRAMS = [
    ("no-inf-bucket", hist(["0.1 1", "0.5 2"])),
    ("only-inf-bucket", hist(["+Inf 3"])),
    ("non-monotonic", hist(["0.1 5", "0.5 2", "+Inf 5"])),
    ("count-disagrees", hist(["0.1 1", "+Inf 2"], count="7")),
    ("bad-le", hist(["abc 1", "+Inf 2"])),
    ("nan-bucket", hist(["0.1 NaN", "+Inf 2"])),
    ("empty", hist(["0.1 0", "+Inf 0"])),
]


@pytest.mark.parametrize("text", [t for _, t in BAD_HISTOGRAMS],
                         ids=[i for i, _ in BAD_HISTOGRAMS])
def test_malformed_histogram_is_missing(text):
    s = parse_vllm_metrics(text, 0)
    assert s.ttft_p50_ms is None and "ttft_p50_ms" in s.missing


def test_good_histogram_interpolates_like_histogram_quantile():
    s = parse_vllm_metrics(hist(["0.1 0", "0.2 4", "+Inf 4"], count="4"), 0)
    assert s.ttft_p50_ms == pytest.approx(150.0) and s.ttft_p95_ms == pytest.approx(195.0)


BAD_JSON = [
    ("slots-object", "slots", '{"error": {"code": 501, "message": "disabled"}}'),
    ("slots-empty-list", "slots", "[]"),
    ("slots-flag-not-bool", "slots", '[{"id": 0, "is_processing": 1}]'),
    ("slots-item-not-object", "slots", "[1, 2]"),
    ("slots-deep", "slots", "[" * 100_000),
    ("ps-list", "ollama", "[]"),
    ("ps-models-not-list", "ollama", '{"models": {}}'),
    ("ps-no-size-vram", "ollama", '{"models": [{"name": "m"}]}'),
    ("ps-bool-size-vram", "ollama", '{"models": [{"name": "m", "size_vram": true}]}'),
    ("ps-negative", "ollama", '{"models": [{"name": "m", "size_vram": -1}]}'),
]


@pytest.mark.parametrize("kind,text", [(k, t) for _, k, t in BAD_JSON],
                         ids=[i for i, _, _ in BAD_JSON])
def test_bad_json_is_missing(kind, text):
    s = JSON_PARSERS[kind](text, 0)
    assert all(getattr(s, n) is None for n in SIGNALS) and s.missing


def test_ollama_nothing_loaded_is_a_valid_empty_answer():
    s = parse_ollama_ps('{"models": []}', 0)
    assert s.loaded_models == () and s.missing == ()


def test_dcgm_sums_memory_and_averages_util_across_gpus():
    text = "".join(f'DCGM_FI_DEV_{f}{{gpu="{g}"}} {v}\n' for f, g, v in [
        ("FB_USED", 0, 100), ("FB_USED", 1, 300), ("FB_FREE", 0, 1), ("FB_FREE", 1, 2),
        ("GPU_UTIL", 0, 20), ("GPU_UTIL", 1, 60)])
    s = parse_dcgm(text, 0)
    assert (s.gpu_mem_used_bytes, s.gpu_mem_free_bytes, s.gpu_util) == (
        400 * 2**20, 3 * 2**20, pytest.approx(0.4))
    one = parse_dcgm(text, 0, gpu="1")
    assert (one.gpu_mem_used_bytes, one.gpu_util) == (300 * 2**20, pytest.approx(0.6))
    assert parse_dcgm('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 140\n', 0).gpu_util is None


def test_sglang_tp_ranks_are_not_double_counted():
    text = ('sglang:num_running_reqs{tp_rank="0",dp_rank="0"} 4\n'
            'sglang:num_running_reqs{tp_rank="1",dp_rank="0"} 4\n'
            'sglang:num_running_reqs{tp_rank="0",dp_rank="1"} 3\n')
    assert parse_sglang_metrics(text, 0).running == 7


def test_diff_buckets_gives_the_window_and_rejects_resets():
    old = ((0.1, 1.0), (math.inf, 2.0))
    new = ((0.1, 3.0), (math.inf, 6.0))
    assert prom.diff_buckets(new, old) == ((0.1, 2.0), (math.inf, 4.0))
    assert prom.diff_buckets(old, new) is None
    assert prom.diff_buckets(new, ((0.2, 1.0), (math.inf, 2.0))) is None


def test_signals_tuple_matches_dataclass():
    assert signal_names() == SIGNALS


# --- invariants -----------------------------------------------------------------------------

NAMES = ["vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
         "sglang:token_usage", "sglang:num_queue_reqs", "llamacpp:kv_cache_usage_ratio",
         "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
         "vllm:time_to_first_token_seconds_bucket", "sglang:time_to_first_token_seconds_bucket"]
VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "0", "1", "-0", "1e400"]))
LINE = st.builds(lambda n, le, v: f'{n}{{le="{le}",engine="0"}} {v}' if "bucket" in n
                 else f"{n} {v}", st.sampled_from(NAMES),
                 st.sampled_from(["0.1", "1", "+Inf", "x"]), VALUES)


def check(s: EngineSignals) -> None:
    for name in FRACTIONS:
        value = getattr(s, name)
        assert value is None or 0.0 <= value <= 1.0
    assert all(getattr(s, name) is None for name in s.missing)


@given(st.text(), st.sampled_from(sorted(ALL)))
def test_arbitrary_text_never_raises(text, kind):
    s = ALL[kind](text, 0.0)
    check(s)
    assert set(s.missing) <= set(SIGNALS)


@given(st.lists(LINE, max_size=12), st.sampled_from(sorted(TEXT_PARSERS)))
def test_plausible_metrics_keep_fractions_in_range(lines, kind):
    s = TEXT_PARSERS[kind]("\n".join(lines) + "\n", 0.0)
    check(s)


BUCKETS = st.lists(st.tuples(st.floats(1e-6, 1e4), st.integers(0, 50)), min_size=1,
                   max_size=8, unique_by=lambda t: t[0]).map(
    lambda xs: _cumulative(sorted(xs)))


def _cumulative(xs: list[tuple[float, int]]) -> prom.Buckets:
    total, out = 0.0, []
    for bound, n in xs:
        total += n
        out.append((bound, total))
    return (*out, (math.inf, total + 1))


@given(BUCKETS, st.floats(0, 1), st.floats(0, 1))
def test_quantile_is_monotone_in_q(buckets, q1, q2):
    lo, hi = sorted((q1, q2))
    a, b = prom.quantile(buckets, lo), prom.quantile(buckets, hi)
    assert a is not None and b is not None
    assert a <= b + 1e-9 * max(1.0, abs(b))
    assert 0.0 <= a and b <= buckets[-2][0]


DCGM_NONSENSE = [  # a reading that is there but cannot be true: rejected, counted, not used
    ("kelvin", 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 351.15', "gpu_temp_c"),
    ("negative-temp", 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} -4', "gpu_temp_c"),
    ("nan-temp", 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} NaN', "gpu_temp_c"),
    ("one-gpu-of-two", 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 60\nDCGM_FI_DEV_GPU_TEMP{gpu="1"} NaN',
     "gpu_temp_c"),
    ("dram-as-percent", 'DCGM_FI_PROF_DRAM_ACTIVE{gpu="0"} 73', "gpu_mem_bw_util"),
    ("copy-util-over-100", 'DCGM_FI_DEV_MEM_COPY_UTIL{gpu="0"} 170', "gpu_mem_bw_util"),
    ("negative-dram", 'DCGM_FI_PROF_DRAM_ACTIVE{gpu="0"} -0.2', "gpu_mem_bw_util"),
]


@pytest.mark.parametrize("text,name", [pytest.param(t, n, id=i) for i, t, n in DCGM_NONSENSE])
def test_dcgm_nonsense_is_rejected_and_named(text, name):
    s = parse_dcgm(text + "\n", 0)
    assert getattr(s, name) is None and s.rejected == (name,) and name in s.missing


def test_dcgm_takes_the_hottest_gpu_and_prefers_dram_active():
    text = ('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 61\nDCGM_FI_DEV_GPU_TEMP{gpu="1"} 83\n'
            'DCGM_FI_PROF_DRAM_ACTIVE{gpu="0"} 0.5\nDCGM_FI_PROF_DRAM_ACTIVE{gpu="1"} 0.7\n'
            'DCGM_FI_DEV_MEM_COPY_UTIL{gpu="0"} 10\n')
    s = parse_dcgm(text, 0)
    assert (s.gpu_temp_c, s.gpu_mem_bw_util, s.rejected) == (83.0, pytest.approx(0.6), ())
    assert parse_dcgm('DCGM_FI_DEV_MEM_COPY_UTIL{gpu="0"} 45\n', 0).gpu_mem_bw_util == 0.45
