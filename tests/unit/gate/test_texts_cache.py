"""Compressed fitting texts kept on disk (``gate/texts_cache.py``): the same list as
compressing anew, read back instead of recompressed, recomputed when damaged."""

from __future__ import annotations

import json
from pathlib import Path

from llmroute.gate.model import fit_texts
from llmroute.gate.texts_cache import compressed, texts_key

EXAMPLES = [("Translate 'good morning' into French.", "translate"),
            ("def f(x):\n    return x + 1\nWhy does this fail?", "code"),
            ("帮我写一首关于秋天的诗", "creative")]


def test_stored_texts_are_what_compression_gives(tmp_path: Path) -> None:
    assert fit_texts(EXAMPLES, tmp_path) == fit_texts(EXAMPLES)
    assert len(list(tmp_path.glob("texts-*.json"))) == 1
    assert fit_texts(EXAMPLES, tmp_path) == fit_texts(EXAMPLES)


def test_a_stored_list_is_read_not_recomputed(tmp_path: Path) -> None:
    calls: list[str] = []

    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    texts = [t for t, _ in EXAMPLES]
    assert compressed(texts, tmp_path, upper) == [t.upper() for t in texts]
    assert compressed(texts, tmp_path, upper) == [t.upper() for t in texts]
    assert calls == texts  # once, by the first call


def test_a_damaged_file_is_recomputed_and_rewritten(tmp_path: Path) -> None:
    texts = [t for t, _ in EXAMPLES]
    path = tmp_path / f"texts-{texts_key(texts)}.json"
    compressed(texts, tmp_path, str.upper)
    for damage in (b"[\"trunc", json.dumps(["only one"]).encode(), b"{}"):
        path.write_bytes(damage)
        assert compressed(texts, tmp_path, str.upper) == [t.upper() for t in texts]
        assert json.loads(path.read_bytes()) == [t.upper() for t in texts]


def test_another_text_or_order_is_another_key() -> None:
    texts = [t for t, _ in EXAMPLES]
    assert texts_key(texts) != texts_key(texts[::-1])
    assert texts_key(texts) != texts_key([*texts[:-1], texts[-1] + "!"])
    assert texts_key(texts) == texts_key(list(texts))


def test_an_unwritable_folder_still_gives_the_texts(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert compressed(["a", "b"], blocked, str.upper) == ["A", "B"]
