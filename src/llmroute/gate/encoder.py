"""Sentence encoders on ONNX Runtime: tokenise, run, mean-pool, L2-normalise.

``TunedEncoder(folder)`` is the gate's: the fine-tuned multilingual-e5-small
(``finetune``, ``tuned``). ``OnnxEncoder(folder)`` is all-MiniLM-L6-v2 (the benchmarks'
baseline); it loads ``model-int8.onnx`` (or ``model.onnx`` with ``int8=False``)
and ``tokenizer.json`` from an ``export.ensure_exported()`` folder. One intra-op thread by
default: the gate is sized for one CPU core. ``encode(texts)`` is synchronous and
thread-safe (ONNX Runtime sessions may be run concurrently); the gate calls it from a worker
thread through ``batcher.MicroBatcher``.

Pooling follows sentence-transformers' all-MiniLM-L6-v2 (``1_Pooling/config.json``: mean
over non-padding tokens), then L2 normalisation, so dot products are cosine similarities.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from llmroute.errors import GateModelError
from llmroute.gate.export import FP32, INT8, TOKENIZER
from llmroute.gate.ort_cache import open_session

TUNED_TOKENIZER = "tokenizer.json.gz"
MAX_TOKENS = 64
DIM = 384
PREFIX = "query: "
"""What the fine-tuned (E5) encoder reads before a text: E5 models are trained with a
``query: `` or ``passage: `` prefix, ``query: `` being the one for classification."""
HEAD_TOKENS = 48
"""Of a text longer than ``MAX_TOKENS`` tokens the fine-tuned encoder reads the first
``HEAD_TOKENS`` and the last ``MAX_TOKENS − HEAD_TOKENS`` (``clip``): a task wrapped in
requirements, or stated after a pasted text, is at one end or the other."""


def clip(ids: list[int], limit: int = MAX_TOKENS, head: int = HEAD_TOKENS) -> list[int]:
    """``ids`` (specials included) cut to ``limit``: the first ``head`` and the last
    ``limit − head`` when longer."""
    return ids if len(ids) <= limit else ids[:head] + ids[len(ids) - (limit - head):]


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Masked mean over the sequence axis, L2-normalised: ``(b, s, d), (b, s) → (b, d)``."""
    m = mask[..., None].astype(np.float32)
    pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


class OnnxEncoder:
    """all-MiniLM-L6-v2 on ONNX Runtime; ``encode`` returns ``(n, 384)`` float32 unit rows.

    ``max_tokens`` truncates each text (word pieces, [CLS]/[SEP] included); ``threads`` is
    ONNX Runtime's intra-op thread count. Raises GateModelError when the files cannot be
    loaded.
    """

    def __init__(self, folder: Path, *, int8: bool = True, max_tokens: int = MAX_TOKENS,
                 threads: int = 1) -> None:
        try:
            self._tok = self._tokenizer(folder)
            self._session = open_session(folder / (INT8 if int8 else FP32), threads)
        except Exception as err:  # onnxruntime raises its own, unexported error types
            raise GateModelError(f"gate: cannot load the encoder from {folder}: {err}") from err
        self._tok.enable_truncation(max_length=max_tokens)
        self._tok.enable_padding(pad_id=0, pad_token="[PAD]")
        self.max_tokens = max_tokens

    def _tokenizer(self, folder: Path) -> Tokenizer:
        """The folder's ``tokenizer.json``."""
        return Tokenizer.from_file(str(folder / TOKENIZER))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: ``(len(texts), 384)`` float32, each row of unit length (zeros for
        an empty list)."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        batch = self._tokenize([t or " " for t in texts])
        ids = np.array([e.ids for e in batch], dtype=np.int64)
        mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (hidden,) = self._session.run(None, feeds)
        return mean_pool(hidden, mask)

    def _tokenize(self, texts: list[str]) -> list:
        """``tokenizers.Encoding`` per text. One text (the common, unbatched case) is run on
        the calling thread: ``encode_batch`` hands work to the library's rayon thread pool,
        whose idle workers spin for a while after each job — on a router pinned to one core
        they would take that core from the event loop."""
        if len(texts) == 1:
            return [self._tok.encode(texts[0])]
        return self._tok.encode_batch(texts)


class TunedEncoder(OnnxEncoder):
    """The fine-tuned multilingual-e5-small (``finetune``; a ``pick.resolve()`` folder) on
    ONNX Runtime: reads ``PREFIX`` + each text, ``clip``-ped to ``MAX_TOKENS`` tokens, pads
    with XLM-R's ``<pad>`` (id 1); ``encode`` returns ``(n, 384)`` float32 unit rows, English
    and Chinese alike. Raises GateModelError when the files cannot be loaded."""

    PAD = 1

    def __init__(self, folder: Path, *, threads: int = 1, max_tokens: int = MAX_TOKENS) -> None:
        super().__init__(folder, threads=threads, max_tokens=max_tokens)
        self._tok.no_truncation()
        self._tok.no_padding()

    def _tokenizer(self, folder: Path) -> Tokenizer:
        """The folder's ``tokenizer.json.gz`` (gzip keeps the shipped model small)."""
        return Tokenizer.from_str(gzip.decompress((folder / TUNED_TOKENIZER).read_bytes())
                                  .decode("utf-8"))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: ``(len(texts), 384)`` float32, each row of unit length (zeros for
        an empty list)."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        rows = [clip(e.ids, self.max_tokens) for e in self._tokenize([PREFIX + (t or " ")
                                                                     for t in texts])]
        ids = np.full((len(rows), max(map(len, rows))), self.PAD, dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, :len(row)], mask[i, :len(row)] = row, 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (hidden,) = self._session.run(None, feeds)
        return mean_pool(hidden, mask)
