"""Building the gate's fitted models from labelled utterances (blocking: run in a thread).

``build_model(examples, encoder_folder)`` fits the n-gram head on the compressed texts and,
when an exported encoder folder is given, embeds the utterances (cached next to the export
as ``emb-<digest>.npy``, keyed by the texts) and fits the embedding head on them. Labels are
sorted, so both heads share one class order.
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

    def encoder_proba(self, embedding: np.ndarray) -> np.ndarray:
        """Second-opinion probabilities for one ``(384,)`` embedding."""
        assert self.embed is not None
        return self.embed.proba([embedding])[0]


def fit_texts(examples: Sequence[tuple[str, str]]) -> list[str]:
    """What the heads read of each example: the compressed latest turn."""
    return [compress_text(text).latest for text, _ in examples]


def build_model(examples: Sequence[tuple[str, str]], encoder_folder: Path | None = None,
                threads: int = 1) -> GateModel:
    """Fit the heads on ``(text, intent)`` pairs; with ``encoder_folder`` load the encoder
    too. Raises ConfigError (fewer than two intents) or GateModelError (encoder files)."""
    texts, labels = fit_texts(examples), [intent for _, intent in examples]
    fast = NgramHead().fit(texts, labels)
    if encoder_folder is None:
        return GateModel(tuple(fast.classes), fast)
    encoder = OnnxEncoder(encoder_folder, threads=threads)
    vectors = cached_embeddings(encoder, texts, encoder_folder)
    embed = EmbeddingHead().fit(list(vectors), labels)
    return GateModel(tuple(fast.classes), fast, encoder, embed)


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
