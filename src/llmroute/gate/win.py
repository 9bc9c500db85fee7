"""The win head: for a ladder of pools (cheapest first, the last the reference), the
probability that each cheaper pool answers a request at least as well as the reference —
from the gate's own features of the request, so it costs a few dot products on top of a
classification.

Features (``dense_features``), all read off what the gate computed anyway:

- optionally the encoder's sentence embedding of the latest user turn (``d`` floats, unit
  length; the head records the encoder and is ignored, with one warning, by a gate whose
  encoder differs). The served gate and ``win_fit.gate_rows`` leave it out (``d`` = 0):
  the gate asks its encoder only for requests its first stage is unsure of;
- the first stage's intent probabilities, as logs (``verdict.first_stage``: the n-gram
  head, the rules and the structure terms, before the second opinion and rule overrides);
- complexity (0.1–5.0), ``log1p`` of the user characters, ``log1p`` of the earlier user
  turns (conversation depth), code blocks (any; ``log1p`` of their lines), tools (given;
  named in the request), pasted material, a supplied document, a label set, the CJK share;

and, optionally, the first stage's hashed n-gram vector (``head.NgramHead``'s two
L2-normalised halves), read by a second linear model.

Per cheaper pool the head is logistic: ``P = σ(½ (x·w + b) + ½ (n·v + c))`` — the dense
part over ``x`` (its standardisation folded into ``w`` and ``b`` at fit time) and the n-gram
part over the hashed vector ``n`` (without one: ``P = σ(x·w + b)``). The two parts are
fitted apart (``win_fit.py``) and their logits averaged. ``rank`` is ``P``'s place among the
head's out-of-fold probabilities of its own fit prompts (``calibration``, sorted), so a
strategy can ask for a share of requests rather than a probability.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from llmroute.gate.compress import Compressed
from llmroute.gate.head import N_FEATURES, row_norms
from llmroute.types import Win

STRUCTURE = ("complexity", "log_chars", "log_earlier_turns", "code", "log_code_lines",
             "tools", "tool_match", "pasted", "document", "choices", "cjk")
"""The dense features after the embedding and the intent log-probabilities, in order."""
PROB_FLOOR = 1e-6


def dense_features(embedding: np.ndarray | None, p_first: np.ndarray, complexity: float,
                   c: Compressed) -> np.ndarray:
    """The dense feature row ``(d + k + len(STRUCTURE),)`` float64: ``embedding`` (``(d,)``,
    None: no encoder, ``d`` = 0), ``log p_first`` (``(k,)``, floored at ``PROB_FLOOR``),
    then ``STRUCTURE``."""
    structure = (complexity, np.log1p(c.chars), np.log1p(max(c.turns - 1, 0)),
                 float(c.code_blocks > 0), np.log1p(c.code_lines), float(c.has_tools),
                 float(c.tool_match), float(c.pasted), float(c.document), float(c.choices),
                 c.cjk)
    parts = [np.log(np.maximum(p_first, PROB_FLOOR)), np.array(structure)]
    if embedding is not None:
        parts.insert(0, np.asarray(embedding, dtype=np.float64))
    return np.concatenate(parts)


Halves = tuple[sparse.csr_matrix, sparse.csr_matrix]
"""The first stage's hashed n-gram rows ``(chars, words)``, unnormalised (``NgramHead``)."""


@dataclass(frozen=True)
class WinHead:
    """A fitted win head (module docstring). ``pools``: the ladder, cheapest first (the
    last is the reference); ``classes``: the gate's intents its probability features follow;
    ``encoder``: the identity of the encoder its embeddings came from (None: none) and
    ``embed_dim`` their size; ``dense_w`` ``(f, k−1)`` and ``dense_b`` ``(k−1,)``;
    ``ngram_w`` ``(2·2^18, k−1)`` and ``ngram_b``, or None; ``calibration`` ``(m, k−1)``,
    each column sorted (the out-of-fold probabilities of the fit prompts); ``key``: the
    digest of what it was fitted on."""

    pools: tuple[str, ...]
    classes: tuple[str, ...]
    encoder: str | None
    embed_dim: int
    dense_w: np.ndarray
    dense_b: np.ndarray
    ngram_w: np.ndarray | None
    ngram_b: np.ndarray | None
    calibration: np.ndarray
    key: str = ""

    def logits(self, dense: np.ndarray, halves: Halves | None) -> np.ndarray:
        """The ``(k−1,)`` logits of one request (``halves`` may be None only for a head
        without an n-gram part)."""
        z = dense @ self.dense_w + self.dense_b
        if self.ngram_w is None or self.ngram_b is None:
            return z
        assert halves is not None, "this head reads the hashed n-grams"
        chars, words = halves
        w = self.ngram_w
        n = (np.asarray(chars @ w[:N_FEATURES])[0] / row_norms(chars)[0]
             + np.asarray(words @ w[N_FEATURES:])[0] / row_norms(words)[0])
        return 0.5 * z + 0.5 * (n + self.ngram_b)

    def batch_logits(self, dense: np.ndarray, ngrams: sparse.csr_matrix | None
                     ) -> np.ndarray:
        """The ``(n, k−1)`` logits of ``n`` rows at once: ``dense`` ``(n, f)`` and ``ngrams``
        ``(n, 2·2^18)``, each half already L2-normalised (``NgramHead.features``; may be
        None only for a head without an n-gram part)."""
        z = dense @ self.dense_w + self.dense_b
        if self.ngram_w is None or self.ngram_b is None:
            return z
        assert ngrams is not None, "this head reads the hashed n-grams"
        return 0.5 * z + 0.5 * (np.asarray(ngrams @ self.ngram_w) + self.ngram_b)

    def predict(self, dense: np.ndarray, halves: Halves | None = None) -> tuple[Win, ...]:
        """One ``Win`` per cheaper pool, cheapest first, probabilities and ranks rounded to
        4 places."""
        p = 1.0 / (1.0 + np.exp(-self.logits(dense, halves)))
        cal = self.calibration
        return tuple(Win(pool, round(float(p[j]), 4),
                         round(float(np.searchsorted(cal[:, j], p[j])) / len(cal), 4))
                     for j, pool in enumerate(self.pools[:-1]))

    def usable_with(self, pools: Sequence[str], classes: Sequence[str], encoder: str | None
                    ) -> str | None:
        """Why this head cannot serve a gate with ``classes`` and ``encoder`` routing to
        ``pools`` (None: it can)."""
        missing = [p for p in self.pools if p not in pools]
        if missing:
            return f"it was fitted for pools that are not configured: {', '.join(missing)}"
        if tuple(classes) != self.classes:
            return "the gate's intents changed since it was fitted"
        if encoder != self.encoder:
            return (f"it was fitted on the embeddings of encoder {self.encoder or 'none'}, "
                    f"the gate now has {encoder or 'none'}")
        return None

    def state(self) -> dict[str, np.ndarray]:
        """The head as plain arrays (``np.load(allow_pickle=False)`` reads them back): the
        n-gram weights as their non-zero rows."""
        out = {"pools": np.array(self.pools, dtype=str), "classes": np.array(self.classes,
                                                                              dtype=str),
               "encoder": np.array(self.encoder or ""), "embed_dim": np.array(self.embed_dim),
               "dense_w": self.dense_w, "dense_b": self.dense_b,
               "calibration": self.calibration, "key": np.array(self.key)}
        if self.ngram_w is not None and self.ngram_b is not None:
            rows = np.flatnonzero(np.any(self.ngram_w != 0, axis=1))
            out |= {"ngram_rows": rows, "ngram_values": self.ngram_w[rows],
                    "ngram_b": self.ngram_b}
        return out

    @classmethod
    def restore(cls, arrays: Mapping[str, np.ndarray]) -> WinHead:
        """The head ``state()`` wrote. Raises KeyError or ValueError for missing arrays or
        inconsistent shapes."""
        pools = tuple(str(p) for p in arrays["pools"])
        k = len(pools) - 1
        dense_w, dense_b = np.asarray(arrays["dense_w"], float), np.asarray(arrays["dense_b"],
                                                                           float)
        cal = np.asarray(arrays["calibration"], float)
        if k < 1 or dense_w.ndim != 2 or dense_w.shape[1] != k or dense_b.shape != (k,) \
                or cal.ndim != 2 or cal.shape[1] != k or not len(cal):
            raise ValueError("win head arrays have inconsistent shapes")
        ngram_w = ngram_b = None
        if "ngram_rows" in arrays:
            rows, values = np.asarray(arrays["ngram_rows"]), np.asarray(arrays["ngram_values"])
            if values.shape != (len(rows), k) or (rows.size and rows.max() >= 2 * N_FEATURES):
                raise ValueError("win head n-gram arrays have inconsistent shapes")
            ngram_w = np.zeros((2 * N_FEATURES, k))
            ngram_w[rows] = values
            ngram_b = np.asarray(arrays["ngram_b"], float).reshape(k)
        encoder = str(arrays["encoder"]) or None
        return cls(pools, tuple(str(c) for c in arrays["classes"]), encoder,
                   int(arrays["embed_dim"]), dense_w, dense_b, ngram_w, ngram_b, cal,
                   str(arrays["key"]))
