"""The fine-tuned encoder: bad fine-tuning data, the model's key and digests, the shipped
model, and one real (tiny) fine-tune that an interruption cannot spoil."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmroute.errors import ConfigError
from llmroute.gate import e5base, finetune, pick, tuned
from llmroute.gate.encoder import MAX_TOKENS, TunedEncoder, clip
from llmroute.gate.evaluate import lenient, score

ROWS = [(1, "write a haiku about rain", "creative_writing"), (2, "solve 2x + 3 = 11", "math"),
        (3, "把这句话翻译成英文：早上好", "translation"), (4, "用Go写一个并发安全的计数器", "code")]


@pytest.mark.parametrize(("bad", "message"), [
    ((5, "hello there", "smalltalk"), "data:5: unknown intent 'smalltalk'"),
    ((5, "   ", "chat"), "data:5: empty prompt"),
    ((5, "solve 2x + 3 = 11", "math"), "data:5: duplicate of line 2"),
])
def test_bad_rows_name_their_line(bad: tuple[int, str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        finetune.check_rows([*ROWS, bad], where="data")


def test_one_intent_only_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least two intents"):
        finetune.check_rows([(1, "a", "math"), (2, "b", "math")], where="data")


def test_the_command_reports_a_bad_file_by_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"prompt": "solve x + 1 = 2", "intent": "math"}\n\n'
                    '{"prompt": "hi", "intent": "greeting"}\n')
    assert finetune.main(["--data", str(data), "--out", str(tmp_path / "m")]) == 2
    assert f"{data}:3: unknown intent 'greeting'" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_split_is_stratified_and_stable() -> None:
    labels = ["a"] * 20 + ["b"] * 10 + ["c"]
    train, val = finetune.split(labels)
    assert sorted([*train, *val]) == list(range(31))
    assert [labels[i] for i in val].count("a") == 2 and [labels[i] for i in val].count("b") == 1
    assert "c" not in [labels[i] for i in val]
    assert np.array_equal(finetune.split(labels)[1], val)


def test_clip_keeps_both_ends() -> None:
    ids = list(range(100))
    assert clip(ids) == [*range(48), *range(100 - (MAX_TOKENS - 48), 100)]
    assert clip(ids[:10]) == ids[:10]


def test_dequantize_reads_q4_0_blocks() -> None:
    d = np.float16(0.5).tobytes()
    qs = bytes([(15 - q) << 4 | q for q in range(16)])  # low nibble q, high nibble 15 − q
    w = e5base.dequantize(d + qs, 1, 32)
    assert np.allclose(w[0, :16], 0.5 * (np.arange(16) - 8))
    assert np.allclose(w[0, 16:], 0.5 * (15 - np.arange(16) - 8))


def test_lenient_score_counts_an_also_label() -> None:
    truth, pred = ["summarization", "math", "code"], ["creative_writing", "math", "math"]
    also = [("creative_writing",), (), ()]
    assert lenient(truth, pred, also) == ["creative_writing", "math", "code"]
    assert score(lenient(truth, pred, also), pred).macro_f1 > score(truth, pred).macro_f1


def _fake_model(folder: Path, key: str) -> Path:
    folder.mkdir(parents=True)
    for name in tuned.FILES:
        (folder / name).write_bytes(b"weights of " + name.encode())
    tuned.write_manifest(folder, key, {"epoch": 1})
    return folder


def test_a_damaged_model_is_detected_by_its_digests(tmp_path: Path) -> None:
    folder = _fake_model(tmp_path / "m", "k1")
    assert tuned.verified_key(folder) == "k1" and tuned.usable(folder, "k1")
    assert not tuned.usable(folder, "k2")
    (folder / tuned.FILES[0]).write_bytes(b"weights of something else")
    assert tuned.verified_key(folder) is None
    (folder / tuned.MANIFEST).write_text("{not json")
    assert tuned.verified_key(folder) is None


def test_resolve_deletes_a_damaged_cached_model_and_never_loads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMROUTE_CACHE", str(tmp_path))
    monkeypatch.setattr(pick, "current_key", lambda: "new-key")
    shipped = tuned.shipped_folder()
    cached = _fake_model(tuned.cache_folder("new-key"), "new-key")
    assert pick.resolve() == cached
    (cached / tuned.FILES[1]).write_bytes(b"truncated")
    assert pick.resolve() == shipped  # the stale shipped model, with a warning
    assert not cached.exists()


def test_the_shipped_model_is_intact_and_current() -> None:
    """The committed model matches its digests and was fine-tuned on today's rows with
    today's recipe; after changing either, run ``python -m llmroute.gate.finetune --out
    src/llmroute/gate/data/tuned``."""
    assert tuned.verified_key(tuned.shipped_folder()) == pick.current_key()


@pytest.mark.slow
def test_a_tiny_fine_tune_writes_a_loadable_model_and_an_interrupted_one_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = finetune.Recipe(layers=1, trained=1, epochs=1, vocab=3000, batch=4)
    rows = [(i + 1, text, intent) for i, (text, intent) in enumerate(
        [(f"solve {a}x + {a + 1} = {a + 9}", "math") for a in range(6)]
        + [(f"把第{a}句话翻译成英文：早上好", "translation") for a in range(6)])]
    out = finetune.fine_tune(tmp_path / "model", rows, "key-1", recipe, log=lambda _: None)
    assert tuned.verified_key(out) == "key-1"
    vectors = TunedEncoder(out).encode(["solve 3x = 9", "翻译成英文：你好"])
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("llmroute.gate.export.quantise", interrupted)
    with pytest.raises(KeyboardInterrupt):
        finetune.fine_tune(out, rows, "key-2", recipe, log=lambda _: None)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
