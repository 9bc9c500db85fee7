"""Gate parts: compression, complexity anchors and monotonicity, micro-batching, verdict
fields, override hot-reload, the encoder export, labelled-file evaluation."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.cli.main import main
from llmroute.errors import ConfigError
from llmroute.gate.batcher import MicroBatcher
from llmroute.gate.complexity import ComplexityScorer
from llmroute.gate.compress import compress, prompt_request
from llmroute.gate.constants import LATEST_HEAD_CHARS, LATEST_TAIL_CHARS
from llmroute.gate.encoder import OnnxEncoder, mean_pool
from llmroute.gate.export import FP32, INT8, TOKENIZER, export, is_complete
from llmroute.gate.intents import INTENTS
from llmroute.gate.overrides import RuleOverrides
from llmroute.gate.rules import RulesClassifier, inspected_text
from llmroute.gate.verdict import make_intent


def complexity_of(text: str, turns: int = 1) -> float:
    request = prompt_request(text)
    inspected = inspected_text(text)
    scores = RulesClassifier().scores(request, inspected)
    return ComplexityScorer().score(inspected, request.prompt_tokens, scores, turns)


@pytest.mark.parametrize(("text", "expected"), [
    ("write a bubble sort", 0.3),
    ("implement a Transformer in PyTorch and explain vanishing gradients", 4.7),
], ids=["bubble-sort", "transformer"])
def test_complexity_anchors(text: str, expected: float) -> None:
    assert complexity_of(text) == pytest.approx(expected, abs=0.15)


CONSTRAINT_WORDS = ["must", "at least 3", "no more than 100 words", "without recursion",
                    "必须", "不超过五句话", "make sure", "strictly", "only use the stdlib"]


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200), st.lists(st.sampled_from(CONSTRAINT_WORDS), min_size=1, max_size=4))
def test_adding_constraints_never_lowers_complexity(base: str, added: list[str]) -> None:
    before = complexity_of(base)
    after = complexity_of(base + "".join(f" {w}." for w in added))
    assert after >= before


def test_compression_reads_head_and_tail_of_the_latest_turn_first() -> None:
    latest = "START " + "x" * 5000 + " END"
    msgs = [{"role": "user", "content": "earlier question"},
            {"role": "assistant", "content": "an answer"}, {"role": "user", "content": latest}]
    c = compress(prompt_request("", msgs))
    assert c.latest.startswith("START") and c.latest.endswith("END")
    assert c.latest == latest[:LATEST_HEAD_CHARS] + " … " + latest[-LATEST_TAIL_CHARS:]
    short = "START " + "y" * 600 + " END"
    assert compress(prompt_request(short)).latest == short
    assert c.text.endswith("earlier question") and c.turns == 2
    assert "an answer" not in c.text


def test_code_blocks_become_features_and_tools_are_noted() -> None:
    text = "Why does this fail?\n```python\n" + "x = 1\n" * 300 + "```\nthanks"
    tools = [{"type": "function", "function": {"name": "run_tests"}}]
    c = compress(prompt_request("", [{"role": "user", "content": text}], tools))
    assert (c.code_blocks, c.code_langs, c.has_tools, c.tool_names) == (
        1, ("python",), True, ("run_tests",))
    assert "x = 1" not in c.text and "⟦code python" in c.text
    assert c.key == compress(prompt_request("", [{"role": "user", "content": text}], tools)).key


async def test_micro_batcher_batches_a_burst_and_delivers_errors() -> None:
    calls: list[int] = []

    def fn(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        if "boom" in texts:
            raise ValueError("boom")
        return np.array([[len(t)] for t in texts], dtype=np.float32)

    with ThreadPoolExecutor(1) as pool:
        b = MicroBatcher(fn, max_wait_ms=2.0, max_batch=16, executor=pool)
        rows = await asyncio.gather(*(b.submit("a" * i) for i in range(32)))
        assert [int(r[0]) for r in rows] == list(range(32))
        assert len(calls) <= 3 and sum(calls) == 32
        with pytest.raises(ValueError, match="boom"):
            await b.submit("boom")


def test_verdict_fields_and_composite() -> None:
    labels = INTENTS[:4]
    close = make_intent(np.array([0.42, 0.40, 0.1, 0.08]), labels, 1.0, "fast", 0.15)
    assert close.composite == (labels[0], labels[1]) and close.is_composite
    assert close.conflict == pytest.approx(0.98) and close.entropy > 1.0
    clear = make_intent(np.array([0.97, 0.01, 0.01, 0.01]), labels, 1.0, "fast", 0.15)
    assert clear.composite == () and clear.runners_up[0][1] == 0.01


def test_bad_override_rules_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown intent"):
        RuleOverrides({"nope": ["x"]}, INTENTS)
    with pytest.raises(ConfigError, match="bad pattern"):
        RuleOverrides({"code": ["("]}, INTENTS)


def test_export_writes_fp32_int8_and_tokenizer_that_agree(tmp_path: Path) -> None:
    out = export(tmp_path / "minilm")
    assert is_complete(out) and {FP32, INT8, TOKENIZER} <= {p.name for p in out.iterdir()}
    texts = ["write a bubble sort", "把这句话翻译成英文", ""]
    fp32 = OnnxEncoder(out, int8=False).encode(texts)
    int8 = OnnxEncoder(out).encode(texts)
    assert fp32.shape == (3, 384)
    assert np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-4)
    assert (fp32 * int8).sum(axis=1).min() > 0.9
    assert (out / INT8).stat().st_size < (out / FP32).stat().st_size / 2


def test_mean_pool_ignores_padding() -> None:
    hidden = np.array([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]])
    pooled = mean_pool(hidden, np.array([[1, 1, 0]]))
    assert np.allclose(pooled, [[1.0, 0.0]])


def test_gate_eval_prints_result_last_and_skips_unknown_labels(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "labelled.jsonl"
    rows = [{"prompt": "write a python function to reverse a list", "intent": "code"},
            {"messages": [{"role": "user", "content": "what is 12 * 12?"}], "intent": "math"},
            {"prompt": "hello", "intent": "not-an-intent"}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert main(["gate", "eval", "--data", str(data)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert any("not-an-intent" in line for line in out)
    result = json.loads(out[-1].removeprefix("RESULT "))
    assert result["n"] == 2 and set(result["per_intent"]) == {"code", "math"}
    assert result["macro_f1"] == 1.0
