"""Only the metric families a parser names are handed to the library's parser
(``prom.wanted``): on every real capture the signals are the same as from the whole scrape,
and a malformed line of a metric nobody reads spoils nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmroute.anchor.sources import dcgm, llamacpp, prom, sglang, vllm
from llmroute.emulator.engine import EmulatedEngine
from llmroute.emulator.spec import EngineSpec

SHARED = Path("/work/shared/data/engine-metrics")
OURS = Path(__file__).resolve().parents[3] / "data" / "engine"
CAPTURES = [  # module, its names attribute, parse function name, prefix of the capture files
    (vllm, "NAMES", "parse_vllm_metrics", "vllm-"),
    (sglang, "NAMES", "parse_sglang_metrics", "sglang-"),
    (llamacpp, "METRICS_NAMES", "parse_llamacpp_metrics", "llamacpp-"),
    (dcgm, "NAMES", "parse_dcgm", "dcgm-"),
]


def _files(prefix: str) -> list[Path]:
    found = [p for folder in (SHARED, OURS) if folder.is_dir()
             for p in sorted(folder.glob(prefix + "*.txt"))]
    if not found:
        pytest.skip(f"no {prefix} capture in {SHARED}")
    return found


@pytest.mark.parametrize("module,attr,parse,prefix", CAPTURES, ids=[c[3] for c in CAPTURES])
def test_selected_lines_give_the_same_signals_as_the_whole_scrape(
        module, attr, parse, prefix, monkeypatch):
    texts = [p.read_text() for p in _files(prefix)]
    selected = [getattr(module, parse)(t, 1.0) for t in texts]
    monkeypatch.setattr(module, attr, ())  # no names: the whole text goes to the library
    whole = [getattr(module, parse)(t, 1.0) for t in texts]
    assert selected == whole
    assert any(s.running is not None or s.gpu_util is not None for s in selected)


def test_emulator_scrape_reads_the_same_with_far_fewer_lines():
    text = EmulatedEngine(EngineSpec("a100-80g", "7b", served_model="m")).metrics.render()
    text = text.decode()
    kept = prom.wanted(text, vllm.NAMES).splitlines()
    assert 0 < len(kept) < len(text.splitlines())
    assert not any(line.startswith("vllm:e2e_request_latency") for line in kept)
    assert vllm.parse_vllm_metrics(text, 0).ttft_p50_ms is None  # idle: empty histogram
    assert vllm.parse_vllm_metrics(text, 0).running == 0


def test_malformed_line_of_an_unread_metric_spoils_nothing():
    text = ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
            'vllm:some_other_metric{engine="0\n')
    assert prom.read_samples(text) is None
    assert vllm.parse_vllm_metrics(text, 0).running == 3


def test_malformed_line_of_a_read_metric_still_gives_nothing():
    text = 'vllm:num_requests_running 3\nvllm:num_requests_waiting{engine="0\n'
    assert vllm.parse_vllm_metrics(text, 0).running is None


def test_help_and_type_lines_are_selected_by_the_name_they_describe():
    text = ("# HELP vllm:prompt_tokens Prompt tokens.\n# TYPE vllm:prompt_tokens counter\n"
            "vllm:prompt_tokens_total 5\n# HELP other x\nother 1\n# EOF\n\n")
    assert prom.wanted(text, ("vllm:prompt_tokens",)).splitlines() == text.splitlines()[:3]
    assert prom.wanted("other 1\n", ("vllm:",)) == ""
