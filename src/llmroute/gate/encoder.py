"""MiniLM sentence encoder on ONNX Runtime: tokenise, run, mean-pool, L2-normalise.

``OnnxEncoder(folder)`` loads ``model-int8.onnx`` (or ``model.onnx`` with ``int8=False``)
and ``tokenizer.json`` from an ``export.ensure_exported()`` folder. One intra-op thread by
default: the gate is sized for one CPU core. ``encode(texts)`` is synchronous and
thread-safe (ONNX Runtime sessions may be run concurrently); the gate calls it from a worker
thread through ``batcher.MicroBatcher``.

Pooling follows sentence-transformers' all-MiniLM-L6-v2 (``1_Pooling/config.json``: mean
over non-padding tokens), then L2 normalisation, so dot products are cosine similarities.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from llmroute.errors import GateModelError
from llmroute.gate.export import FP32, INT8, TOKENIZER

MAX_TOKENS = 64
DIM = 384


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
        import onnxruntime as ort
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(folder / TOKENIZER))
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            path = folder / (INT8 if int8 else FP32)
            self._session = ort.InferenceSession(str(path), opts,
                                                 providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own, unexported error types
            raise GateModelError(f"gate: cannot load the encoder from {folder}: {err}") from err
        self._tok.enable_truncation(max_length=max_tokens)
        self._tok.enable_padding(pad_id=0, pad_token="[PAD]")
        self.max_tokens = max_tokens

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
