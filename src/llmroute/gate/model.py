"""Building the gate's fitted models from labelled utterances (blocking: run in a thread).

``build_model(examples, encoder_folder)`` fits the n-gram head on the compressed texts and,
when an exported encoder folder is given, embeds the utterances (cached next to the export
as ``emb-<digest>.npy``, keyed by the texts) and fits the embedding head on them. Labels are
sorted, so both heads share one class order. Given a ``cache_dir`` it reads the fitted heads
from there instead when the same fit was stored before (``heads_cache``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmroute.gate.compress import compress_text
from llmroute.gate.encoder import OnnxEncoder
from llmroute.gate.head import EmbeddingHead, NgramHead
from llmroute.gate.heads_cache import heads_key, heads_path, read_heads, write_heads

EMBED_BATCH = 64


@dataclass(frozen=True)
class GateModel:
    """Fitted heads over ``classes``; ``encoder``/``embed`` are None without the encoder."""

    classes: tuple[str, ...]
    fast: NgramHead
    encoder: OnnxEncoder | None = None
    embed: EmbeddingHead | None = None

    def fast_proba(self, text: str) -> np.ndarray:
        """First-stage probabilities over ``classes`` for one compressed text."""
        return self.fast.proba([text])[0]

    def clause_labels(self, parts: Sequence[str], floor: float) -> tuple[str | None, ...]:
        """Each of ``parts``' top first-stage label, read in one batch; None for a part
        whose top probability is under ``floor`` (0–1)."""
        rows = self.fast.proba(list(parts))
        return tuple(self.classes[i] if row[i] >= floor else None
                     for row, i in zip(rows, rows.argmax(axis=1)))

    def encoder_proba(self, embedding: np.ndarray) -> np.ndarray:
        """Second-opinion probabilities for one ``(384,)`` embedding."""
        assert self.embed is not None
        return self.embed.proba([embedding])[0]


def fit_texts(examples: Sequence[tuple[str, str]]) -> list[str]:
    """What the heads read of each example: the compressed latest turn."""
    return [compress_text(text).latest for text, _ in examples]


def build_model(examples: Sequence[tuple[str, str]], encoder_folder: Path | None = None,
                threads: int = 1, cache_dir: Path | None = None) -> GateModel:
    """Fit the heads on ``(text, intent)`` pairs; with ``encoder_folder`` load the encoder
    too. With ``cache_dir`` the fitted heads are read from / written to it
    (``heads_cache``: keyed by the texts, labels, encoder and code version). Raises
    ConfigError (fewer than two intents) or GateModelError (encoder files)."""
    texts, labels = fit_texts(examples), [intent for _, intent in examples]
    encoder = None if encoder_folder is None else OnnxEncoder(encoder_folder, threads=threads)
    path = None if cache_dir is None else heads_path(
        cache_dir, heads_key(texts, labels, encoder_id(encoder_folder, encoder)))
    heads = None if path is None else read_heads(path, with_embed=encoder is not None)
    if heads is None:
        heads = fit_heads(texts, labels, encoder, encoder_folder)
        if path is not None:
            write_heads(path, *heads)
    fast, embed = heads
    return GateModel(tuple(fast.classes), fast, encoder, embed)


def encoder_id(folder: Path | None, encoder: OnnxEncoder | None) -> str | None:
    """What identifies the encoder's embeddings: the export folder's name (a digest of the
    model and export recipe) and the token limit; None without an encoder."""
    if folder is None or encoder is None:
        return None
    return f"{folder.name}:{encoder.max_tokens}"


def fit_heads(texts: Sequence[str], labels: Sequence[str], encoder: OnnxEncoder | None,
              folder: Path | None) -> tuple[NgramHead, EmbeddingHead | None]:
    """Fit the n-gram head, and the embedding head when there is an encoder (~10 s)."""
    fast = NgramHead().fit(texts, labels)
    if encoder is None or folder is None:
        return fast, None
    vectors = cached_embeddings(encoder, texts, folder)
    return fast, EmbeddingHead().fit(list(vectors), labels)


def cached_embeddings(encoder: OnnxEncoder, texts: Sequence[str], folder: Path) -> np.ndarray:
    """Embeddings of ``texts`` ``(n, 384)``, read from / written to ``folder`` by digest."""
    digest = hashlib.blake2b(json.dumps([encoder.max_tokens, *texts]).encode(),
                             digest_size=8).hexdigest()
    path = folder / f"emb-{digest}.npy"
    if path.is_file():
        return np.load(path)
    vectors = np.concatenate([encoder.encode(texts[i:i + EMBED_BATCH])
                              for i in range(0, len(texts), EMBED_BATCH)])
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors
