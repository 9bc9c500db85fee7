"""``llmroute classify TEXT`` and ``llmroute gate fit --data FILE``: the gate's verdict as
JSON, and a user's labelled examples checked, stored (unknown labels skipped) and fitted."""

from __future__ import annotations

import json

import pytest

from llmroute.cli.main import main
from llmroute.gate.examples import user_examples

CONFIG = """\
pools: {general: {}}
backends:
  - {id: g, pool: general, engine: vllm, base_url: "http://127.0.0.1:9"}
routing: {default_pool: general}
gate: {encoder: false}
"""


def test_classify_prints_the_intent_as_json(capsys):
    assert main(["classify", "Translate 'good morning' into French, please."]) == 0
    out = capsys.readouterr().out
    verdict, timing = out.rsplit("}\n", 1)
    intent = json.loads(verdict + "}")
    assert intent["label"] == "translation" and 0.5 < intent["confidence"] <= 1
    scores = [p for _, p in intent["runners_up"]]
    assert scores == sorted(scores, reverse=True) and max(scores) < intent["confidence"]
    assert intent["label"] not in {k for k, _ in intent["runners_up"]}
    assert 0.1 <= intent["complexity"] <= 5.0 and intent["source"].startswith("fast")
    assert timing.startswith("classified in ") and "ms" in timing


def test_gate_fit_refuses_a_file_with_a_bad_line_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLMROUTE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "c.yaml").write_text(CONFIG, encoding="utf-8")
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "fine", "intent": "math"}\n{"prompt": "no label"}\n',
                    encoding="utf-8")
    assert main(["gate", "fit", "--data", str(data), "--config", str(tmp_path / "c.yaml")]) \
        != 0
    assert f"{data}:2: need intent and prompt or messages" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()  # nothing stored


@pytest.mark.slow
def test_gate_fit_stores_the_known_examples_and_fits_on_them(tmp_path, monkeypatch, capsys):
    """Fits the heads on the shipped utterances plus two examples (the encoder off: seconds,
    not the MiniLM export); a third, labelled with no configured intent, is skipped."""
    monkeypatch.setenv("LLMROUTE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "c.yaml").write_text(CONFIG, encoding="utf-8")
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "Render this sentence in Klingon: hello friend", "intent": "translation"},
        {"messages": [{"role": "user", "content": "Tally the invoices, give the total"}],
         "intent": "math"},
        {"prompt": "florp the wibble", "intent": "no_such_intent"}]) + "\n", encoding="utf-8")
    assert main(["gate", "fit", "--data", str(data), "--config", str(tmp_path / "c.yaml")]) \
        == 0
    out = capsys.readouterr().out
    assert "skipped 1 example(s) labelled 'no_such_intent'" in out
    assert "with 2 example(s)" in out and "user-examples.jsonl" in out
    assert user_examples() == [("Render this sentence in Klingon: hello friend",
                                "translation"), ("Tally the invoices, give the total", "math")]
    assert list((tmp_path / "cache" / "gate").glob("heads-*.npz"))  # the fitted heads
