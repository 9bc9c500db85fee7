"""The fitted-heads cache: a cold start fits and writes, a warm start reads without fitting
and gives the same verdicts; what the heads depend on changes the key; a damaged file is
refitted and rewritten, never a crash."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.config import GateConfig
from llmroute.gate import heads_cache, semantic
from llmroute.gate.compress import prompt_request
from llmroute.gate.export import ensure_exported
from llmroute.gate.head import EmbeddingHead, NgramHead
from llmroute.gate.heads_cache import heads_dir, heads_key, prune, read_heads
from llmroute.gate.semantic import SemanticGate

EXAMPLES = [("write a bash script that renames every jpg", "code"),
            ("写一个计算斐波那契数列的Java函数", "code"),
            ("my rust program panics on unwrap, fix it", "code"),
            ("这个SQL查询怎么优化", "code"),
            ("translate see you tomorrow into spanish", "translation"),
            ("请翻译成德语：谢谢你的帮助", "translation"),
            ("what's the italian for good night", "translation"),
            ("英译中：the weather is nice today", "translation"),
            ("how deep is the pacific ocean", "open_qa"),
            ("珠穆朗玛峰有多高？", "open_qa"),
            ("when did the roman empire fall", "open_qa"),
            ("什么是量子纠缠？", "open_qa")]
PROMPTS = ["write a go function that reverses a string", "把这段话翻译成法语：你好",
           "who painted the mona lisa", "hmm", "什么是黑洞？"]


@pytest.fixture(scope="module")
def encoder_folder() -> Path:
    return ensure_exported()


def start(tmp_path: Path, folder: Path | None, **cfg: object) -> SemanticGate:
    gate = SemanticGate(GateConfig(cache_dir=str(tmp_path), **cfg), examples=EXAMPLES,
                        encoder_folder=folder)
    gate.load()
    return gate


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob("heads-*.npz"))


async def verdicts(gate: SemanticGate) -> list[tuple[str, float, tuple, str]]:
    out = []
    for text in PROMPTS:
        i = await gate.classify(prompt_request(text))
        out.append((i.label, i.confidence, i.runners_up, i.source))
    return out


def no_fitting(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object) -> None:
        raise AssertionError("the heads were refitted")
    monkeypatch.setattr(NgramHead, "fit", fail)
    monkeypatch.setattr(EmbeddingHead, "fit", fail)


async def test_a_warm_start_reads_the_heads_and_answers_the_same(
        tmp_path: Path, encoder_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = start(tmp_path, encoder_folder)
    assert len(files(tmp_path)) == 1 and cold.model is not None and cold.model.embed is not None
    no_fitting(monkeypatch)
    warm = start(tmp_path, encoder_folder)
    assert warm.model is not None and warm.model.embed is not None
    np.testing.assert_array_equal(warm.model.fast.weights, cold.model.fast.weights)
    np.testing.assert_array_equal(warm.model.embed.weights, cold.model.embed.weights)
    assert await verdicts(warm) == await verdicts(cold)


async def test_without_an_encoder_only_the_first_stage_is_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = start(tmp_path, None, encoder=False)
    no_fitting(monkeypatch)
    warm = start(tmp_path, None, encoder=False)
    assert warm.model is not None and warm.model.embed is None
    assert await verdicts(warm) == await verdicts(cold)


def test_changed_utterances_or_encoder_fit_afresh(tmp_path: Path, encoder_folder: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(semantic, "shipped_utterances", lambda: EXAMPLES[:-1])
    monkeypatch.setattr(semantic, "user_examples", lambda: EXAMPLES[-1:])
    monkeypatch.setattr(heads_cache, "KEEP", 10)

    def default(**cfg: object) -> None:
        SemanticGate(GateConfig(cache_dir=str(tmp_path), **cfg),
                     encoder_folder=encoder_folder).load()

    default()
    default(utterances={"open_qa": ["how tall is everest"]})
    default(utterances={"chat": ["how are you today"]})
    monkeypatch.setattr(semantic, "user_examples", lambda: [])
    default()
    start(tmp_path, None, encoder=False)
    assert len(files(tmp_path)) == 5


def test_rules_and_thresholds_keep_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    start(tmp_path, None, encoder=False)
    no_fitting(monkeypatch)
    start(tmp_path, None, encoder=False, rules={"code": ["golang"]}, second_opinion_below=0.9,
          composite_margin=0.3, cache_size=8)
    assert len(files(tmp_path)) == 1


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=20), st.sampled_from(["a", "b"])), min_size=1,
                max_size=5), st.integers(0, 4), st.text(min_size=1, max_size=3))
def test_any_change_to_a_text_a_label_or_the_encoder_changes_the_key(
        rows: list[tuple[str, str]], at: int, extra: str) -> None:
    texts, labels = [t for t, _ in rows], [label for _, label in rows]
    key = heads_key(texts, labels, "minilm-x:64")
    i = at % len(rows)
    changed_text = [*texts[:i], texts[i] + extra, *texts[i + 1:]]
    changed_label = [*labels[:i], "c", *labels[i + 1:]]
    assert heads_key(changed_text, labels, "minilm-x:64") != key
    assert heads_key(texts, changed_label, "minilm-x:64") != key
    assert heads_key(texts, labels, "minilm-x:128") != key
    assert heads_key(texts, labels, None) != key
    assert heads_key([*texts, extra], [*labels, "a"], "minilm-x:64") != key


def test_a_new_code_version_changes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    key = heads_key(["x", "y"], ["a", "b"], None)
    assert heads_key(["x", "y"], ["a", "b"], None) == key
    monkeypatch.setattr(heads_cache, "FIT_MODULES", ("llmroute.gate.head",))
    assert heads_key(["x", "y"], ["a", "b"], None) != key
    monkeypatch.undo()
    monkeypatch.setattr(heads_cache, "VERSIONED", ("llmroute", "numpy"))
    assert heads_key(["x", "y"], ["a", "b"], None) != key


def _garbage(path: Path) -> None:
    path.write_bytes(b"not a zip file at all")


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _wrong_shapes(path: Path) -> None:
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["fast.values"] = arrays["fast.values"][:, :1]
    np.savez(path, **arrays)


def _pickled(path: Path) -> None:
    np.savez(path, **{"fast.classes": np.array([object()], dtype=object)})


def _missing_head(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("other.npy", b"")


@pytest.mark.parametrize("damage", [_garbage, _truncated, _wrong_shapes, _pickled,
                                    _missing_head])
async def test_a_damaged_file_is_refitted_and_rewritten(tmp_path: Path, damage: object) -> None:
    cold = start(tmp_path, None, encoder=False)
    (path,) = files(tmp_path)
    damage(path)  # type: ignore[operator]
    assert read_heads(path, with_embed=False) is None
    again = start(tmp_path, None, encoder=False)
    assert await verdicts(again) == await verdicts(cold)
    assert read_heads(path, with_embed=False) is not None


def test_an_unwritable_folder_still_gives_fitted_heads(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    gate = SemanticGate(GateConfig(cache_dir=str(blocker / "sub"), encoder=False),
                        examples=EXAMPLES)
    assert gate.load().classes == ("code", "open_qa", "translation")


def test_prune_keeps_the_most_recently_used(tmp_path: Path) -> None:
    for n in range(6):
        path = tmp_path / f"heads-{n}.npz"
        path.write_bytes(b"")
        os.utime(path, (n, n))
    prune(tmp_path, keep=2)
    assert [p.name for p in files(tmp_path)] == ["heads-4.npz", "heads-5.npz"]
    prune(tmp_path)
    assert len(files(tmp_path)) == 2 <= heads_cache.KEEP


def test_the_folder_defaults_to_the_gate_cache(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMROUTE_CACHE", str(tmp_path))
    assert heads_dir() == tmp_path / "gate"
    assert heads_dir(str(tmp_path / "mine")) == tmp_path / "mine"
