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
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmroute.gate.compress import compress_text
from llmroute.gate.encoder import DIM, OnnxEncoder, TunedEncoder
from llmroute.gate.export import cache_root
from llmroute.gate.head import EmbeddingHead, NgramHead
from llmroute.gate.heads_cache import heads_key, heads_path, read_heads, write_heads
from llmroute.gate.probs import softmax
from llmroute.gate.texts_cache import compressed
from llmroute.gate.win import Halves

EMBED_BATCH = 64
MANIFEST = "manifest.json"


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

    def fast_scores(self, text: str) -> tuple[np.ndarray, Halves]:
        """``fast_proba(text)`` and the text's hashed n-gram halves (the win head reads
        them), from one hashing."""
        halves = self.fast.hashed([text])
        logits = self.fast.logits_of(*halves)
        return softmax(logits / self.fast.temperature)[0], halves

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


def fit_texts(examples: Sequence[tuple[str, str]], cache_dir: Path | None = None
              ) -> list[str]:
    """What the heads read of each example: the compressed latest turn. With ``cache_dir``
    the list is read from / stored in it (``texts_cache``: keyed by the texts and the
    compression code)."""
    texts = [text for text, _ in examples]
    if cache_dir is not None:
        return compressed(texts, cache_dir, _latest)
    return [_latest(text) for text in texts]


def _latest(text: str) -> str:
    return compress_text(text).latest


def build_model(examples: Sequence[tuple[str, str]], encoder_folder: Path | None = None,
                threads: int = 1, cache_dir: Path | None = None) -> GateModel:
    """Fit the heads on ``(text, intent)`` pairs; with ``encoder_folder`` load the encoder
    too. With ``cache_dir`` the fitted heads are read from / written to it
    (``heads_cache``: keyed by the texts, labels, encoder and code version). Raises
    ConfigError (fewer than two intents) or GateModelError (encoder files)."""
    texts, labels = fit_texts(examples, cache_dir), [intent for _, intent in examples]
    encoder = None if encoder_folder is None else load_encoder(encoder_folder, threads)
    path = None if cache_dir is None else heads_path(
        cache_dir, heads_key(texts, labels, encoder_id(encoder_folder, encoder)))
    heads = None if path is None else read_heads(path, with_embed=encoder is not None)
    if heads is None:
        heads = fit_heads(texts, labels, encoder, encoder_folder)
        if path is not None:
            write_heads(path, *heads)
    fast, embed = heads
    return GateModel(tuple(fast.classes), fast, encoder, embed)


def load_encoder(folder: Path, threads: int = 1) -> OnnxEncoder:
    """The encoder in ``folder``: the fine-tuned one when the folder has a manifest
    (``tuned``), else an exported MiniLM. Raises GateModelError."""
    if (folder / MANIFEST).is_file():
        return TunedEncoder(folder, threads=threads)
    return OnnxEncoder(folder, threads=threads)


def encoder_id(folder: Path | None, encoder: OnnxEncoder | None) -> str | None:
    """What identifies the encoder's embeddings: the fine-tuned model's file digests (its
    manifest; a re-stamped key with the same weights keeps them) or the export folder's name (a digest of the model and export recipe), and the token
    limit; None without an encoder."""
    if folder is None or encoder is None:
        return None
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
        name = "tuned-" + "-".join(str(files[k])[:16] for k in sorted(files))
    except (OSError, ValueError, KeyError, TypeError):
        name = folder.name
    return f"{name}:{encoder.max_tokens}"


def fit_heads(texts: Sequence[str], labels: Sequence[str], encoder: OnnxEncoder | None,
              folder: Path | None) -> tuple[NgramHead, EmbeddingHead | None]:
    """Fit the n-gram head, and the embedding head when there is an encoder (~10 s)."""
    fast = NgramHead().fit(texts, labels)
    if encoder is None or folder is None:
        return fast, None
    vectors = cached_embeddings(encoder, texts, folder)
    return fast, EmbeddingHead().fit(list(vectors), labels)


def cached_embeddings(encoder: OnnxEncoder, texts: Sequence[str], folder: Path) -> np.ndarray:
    """Embeddings of ``texts`` ``(n, 384)``. Each text's row is kept in one file per encoder
    (``emb-<digest of encoder_id>.npz``: BLAKE2b keys of the texts and their rows, arrays
    only), so a start, a refit on a subset (a benchmark's fold) or on more examples encodes
    only the texts it has not seen. Best effort: an unreadable file is re-made."""
    tag = hashlib.blake2b(str(encoder_id(folder, encoder)).encode(), digest_size=8).hexdigest()
    path = embeddings_dir(folder) / f"emb-{tag}.npz"
    known = _read_rows(path)
    keys = [hashlib.blake2b(t.encode("utf-8", "replace"), digest_size=16).digest() for t in texts]
    missing = list(dict.fromkeys(k for k in keys if k not in known))
    if missing:
        where = {k: i for i, k in enumerate(keys)}
        todo = [texts[where[k]] for k in missing]
        fresh = np.concatenate([encoder.encode(todo[i:i + EMBED_BATCH])
                                for i in range(0, len(todo), EMBED_BATCH)])
        known.update(zip(missing, fresh))
        _write_rows(path, known)
    return np.stack([known[k] for k in keys]) if keys else np.zeros((0, DIM), np.float32)


def _read_rows(path: Path) -> dict[bytes, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return dict(zip((bytes(k) for k in npz["keys"]), npz["vectors"]))
    except (OSError, ValueError, KeyError):
        return {}


def _write_rows(path: Path, rows: dict[bytes, np.ndarray]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npz")
        np.savez(tmp, keys=np.array(list(rows), dtype="S16"), vectors=np.stack(list(rows.values())))
        tmp.replace(path)
    except OSError:
        pass  # best effort: a read-only cache only costs the next start an encoding pass


def embeddings_dir(folder: Path) -> Path:
    """Where the utterances' embeddings for the encoder in ``folder`` are kept: beside an
    exported MiniLM, under ``$LLMROUTE_CACHE/gate`` for a fine-tuned model (its folder may
    be the read-only package)."""
    return cache_root() / "gate" / "embeddings" if (folder / MANIFEST).is_file() else folder
