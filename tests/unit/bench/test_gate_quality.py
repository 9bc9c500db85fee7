"""bench/gate_quality.py: leave-one-source-out scoring and the licence gate on shipped rows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from llmroute.gate.compress import prompt_request
from llmroute.gate.examples import shipped_utterances

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gate_quality",
                                                  ROOT / "bench" / "gate_quality.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_shipped_row_is_ours_or_from_a_permissive_source(bench):
    sources = bench.utterance_sources()
    assert len(sources) == len(shipped_utterances())
    assert {s for s in sources if s is not None} <= bench.TRAINABLE
    assert not {"codealpaca", "p3", "alpaca-eval"} & bench.TRAINABLE


def test_a_non_commercial_source_in_the_shipped_rows_is_refused(bench, tmp_path, monkeypatch):
    rows = [{"text": "hi", "intent": "chat"}, {"text": "x", "intent": "code",
                                               "source": "codealpaca"}]
    path = tmp_path / "utterances.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    monkeypatch.setattr(bench, "SHIPPED", path)
    with pytest.raises(ValueError, match="codealpaca"):
        bench.utterance_sources()


def test_sources_nothing_was_fitted_on_are_scored_per_source_on_the_shipped_labels(bench):
    items = [("a", prompt_request("q1"), "math"), ("a", prompt_request("q2"), "math"),
             ("b", prompt_request("q3"), "chat"), ("b", prompt_request("q4"), "code")]
    pred = ["math", "code", "chat", "code"]
    per_source = bench.loso(items, pred)
    assert per_source["a"] == pytest.approx(2 * 0.5 / 1.5)  # precision 1, recall 0.5
    assert per_source["b"] == pytest.approx(1.0)
