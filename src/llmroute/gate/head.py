"""The gate's two classifier heads and their calibration.

- ``NgramHead`` (first stage): hashed character 1–4-grams (``char_wb``, so Chinese, which has
  no spaces, is read character by character) and word 1–2-grams, 2^18 buckets each
  (scikit-learn's ``HashingVectorizer``, MurmurHash3), each half L2-normalised, then a
  one-vs-rest linear SVM (liblinear; a multinomial logistic regression over 2^19 sparse
  columns takes ~40 s to converge, the SVM 0.5 s at the same held-out F1). A "word" is a run
  of letters/digits outside the CJK blocks, or one CJK character (``WORD_TOKENS``), so
  Chinese adds character unigrams and bigrams to the word half; ``\\w+`` would read an
  unspaced Chinese sentence as one word, a feature seen once, which let the SVM memorise
  each Chinese utterance instead of learning its characters. Predicts in ~0.3 ms (short).
- ``EmbeddingHead`` (second opinion): the same one-vs-rest linear SVM over the encoder's sentence
  embeddings (384 floats, L2-normalised).

Both are calibrated by **temperature scaling** (Guo et al., 2017, "On Calibration of Modern
Neural Networks"): ``T`` minimises the negative log-likelihood of 5-fold out-of-fold logits
over a geometric grid of 0.3–4.0. The floor of 0.3 matters: calibrated on folds of
the utterances alone, the n-gram head picks T ≈ 0.1 and is then certain, and wrong, on
prompts unlike the utterances (templated tasks, long documents), and ``probs = softmax(logits / T)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import sklearn
from scipy import sparse
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import normalize
from sklearn.svm import LinearSVC
from sklearn.utils import extmath

from llmroute.errors import ConfigError
from llmroute.gate.probs import softmax
from llmroute.text import CJK_CHARS

N_FEATURES = 2**18
C_NGRAM = 1.0
C_EMBED = 0.3
FOLDS = 5
TEMPERATURES = np.geomspace(0.3, 4.0, 24)
WORD_TOKENS = rf"(?u)[^\W{CJK_CHARS}]+|[{CJK_CHARS}]"


def best_temperature(logits: np.ndarray, y: np.ndarray) -> float:
    """The grid temperature minimising mean NLL of ``softmax(logits / T)`` at labels ``y``."""
    def nll(t: float) -> float:
        p = softmax(logits / t)[np.arange(len(y)), y]
        return float(-np.log(np.clip(p, 1e-12, 1.0)).mean())
    return float(min(TEMPERATURES, key=nll))


def _check(labels: Sequence[str]) -> list[str]:
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise ConfigError("gate: fitting needs examples of at least two intents")
    return classes


class _Calibrated:
    """A linear SVM with class names and a temperature; subclasses featurise.

    After ``fit`` only the weights are kept, as one C-contiguous ``(features, classes)``
    float64 matrix ``weights`` and a ``(classes,)`` bias, so ``proba`` is one product and no
    scikit-learn call (no per-call input validation)."""

    C = 10.0
    FEATURES = 0
    """Rows of ``weights`` a restored state must have (0: any)."""

    def __init__(self) -> None:
        self.classes: list[str] = []
        self.temperature = 1.0
        self.weights = np.zeros((0, 0))
        self.bias = np.zeros(0)

    def features(self, items: Sequence[object]) -> object:
        """The design matrix for ``items`` (subclasses)."""
        raise NotImplementedError

    def fit(self, items: Sequence[object], labels: Sequence[str]) -> _Calibrated:
        """Fit on ``items`` with intent ``labels`` and calibrate. Raises ConfigError when
        fewer than two intents are given. Returns self."""
        self.classes = _check(labels)
        y = np.array([self.classes.index(label) for label in labels])
        x = self.features(items)
        self.temperature = self._calibrate(x, y)
        model = self._new().fit(x, y)
        coef = model.coef_ if len(self.classes) > 2 else np.vstack([-model.coef_, model.coef_])
        bias = model.intercept_ if len(self.classes) > 2 else np.array(
            [-model.intercept_[0], model.intercept_[0]])
        self.weights = np.ascontiguousarray(coef.T, dtype=np.float64)
        self.bias = np.asarray(bias, dtype=np.float64)
        return self

    def _new(self) -> LinearSVC:
        return LinearSVC(C=self.C)

    def _calibrate(self, x: object, y: np.ndarray) -> float:
        folds = min(FOLDS, int(np.bincount(y).min()))
        if folds < 2:
            return 1.0
        logits = np.zeros((len(y), len(self.classes)))
        for train, test in StratifiedKFold(folds, shuffle=True, random_state=0).split(
                np.zeros(len(y)), y):
            model = self._new().fit(x[train], y[train])  # type: ignore[index]
            scores = model.decision_function(x[test])  # type: ignore[index]
            logits[test] = scores if scores.ndim == 2 else np.stack([-scores, scores], 1)
        return best_temperature(logits, y)

    def state(self) -> dict[str, np.ndarray]:
        """The fitted head as plain arrays (no objects, so ``np.load(allow_pickle=False)``
        reads them): ``classes`` ``(k,)`` str, ``temperature`` ``()``, ``features`` ``()``
        (rows of ``weights``), the non-zero weight rows ``rows`` ``(m,)`` int64 and their
        ``values`` ``(m, k)`` float64 (most hashed n-gram columns are never seen), ``bias``
        ``(k,)``."""
        rows = np.flatnonzero(np.any(self.weights != 0, axis=1))
        return {"classes": np.array(self.classes, dtype=str),
                "temperature": np.array(self.temperature), "bias": self.bias,
                "features": np.array(self.weights.shape[0]), "rows": rows,
                "values": self.weights[rows]}

    def restore(self, state: Mapping[str, np.ndarray]) -> _Calibrated:
        """Adopt a ``state()`` (the same numbers, so the same probabilities). Raises
        ValueError or KeyError when the arrays are missing or their shapes disagree.
        Returns self."""
        classes = [str(c) for c in state["classes"]]
        k, n, rows = len(classes), int(state["features"]), np.asarray(state["rows"])
        values, bias = np.asarray(state["values"], np.float64), np.asarray(state["bias"], np.float64)
        temperature = float(state["temperature"])
        if (k < 2 or values.shape != (len(rows), k) or bias.shape != (k,)
                or n != (self.FEATURES or n) or not temperature > 0
                or (rows.size and (rows.min() < 0 or rows.max() >= n))):
            raise ValueError("gate: stored head arrays have inconsistent shapes")
        weights = np.zeros((n, k))
        weights[rows] = values
        self.classes, self.temperature = classes, temperature
        self.weights, self.bias = weights, bias
        return self

    def logits(self, items: Sequence[object]) -> np.ndarray:
        """The SVM's decision values ``x·W + b``: ``(len(items), len(classes))``."""
        return np.asarray(self.features(items) @ self.weights) + self.bias

    def proba(self, items: Sequence[object]) -> np.ndarray:
        """Calibrated probabilities ``(len(items), len(classes))``, columns in ``classes``."""
        assert self.weights.size, "fit() first"
        return softmax(self.logits(items) / self.temperature)


def row_norms(x: sparse.csr_matrix) -> np.ndarray:
    """L2 norm of each row of a CSR matrix ``(n,)`` (scikit-learn's ``row_norms``; 1 for an
    all-zero row, so dividing by it leaves the row at zero)."""
    norms = extmath.row_norms(x)
    return np.where(norms > 0, norms, 1.0)


class NgramHead(_Calibrated):
    """First stage over compressed texts (see the module docstring)."""

    C = C_NGRAM
    FEATURES = 2 * N_FEATURES

    def __init__(self) -> None:
        super().__init__()
        self._chars = HashingVectorizer(analyzer="char_wb", ngram_range=(1, 4),
                                        n_features=N_FEATURES, alternate_sign=False, norm=None)
        self._words = HashingVectorizer(analyzer="word", ngram_range=(1, 2),
                                        n_features=N_FEATURES, alternate_sign=False, norm=None,
                                        token_pattern=WORD_TOKENS)

    def _halves(self, texts: list[str]) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
        with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
            return self._chars.transform(texts), self._words.transform(texts)

    def features(self, items: Sequence[object]) -> sparse.csr_matrix:
        """Sparse ``(n, 2·2^18)`` hashed n-gram counts, each half L2-normalised."""
        chars, words = self._halves([str(t) for t in items])
        return sparse.hstack([normalize(chars), normalize(words)], format="csr")

    def hashed(self, texts: Sequence[str]) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
        """The two hashed halves ``(chars, words)`` of ``texts``, unnormalised: each
        ``(len(texts), 2^18)`` (what ``logits_of`` and the win head read)."""
        return self._halves(list(texts))

    def logits(self, items: Sequence[object]) -> np.ndarray:
        """``features(items)·W + b`` computed per half, each divided by its row norm (the
        same numbers without building the normalised, stacked matrix)."""
        return self.logits_of(*self._halves([str(t) for t in items]))

    def logits_of(self, chars: sparse.csr_matrix, words: sparse.csr_matrix) -> np.ndarray:
        """``logits`` of already hashed halves (``hashed``)."""
        w = self.weights
        out = (np.asarray(chars @ w[:N_FEATURES]) / row_norms(chars)[:, None]
               + np.asarray(words @ w[N_FEATURES:]) / row_norms(words)[:, None])
        return out + self.bias


class EmbeddingHead(_Calibrated):
    """Second opinion over sentence embeddings ``(n, 384)`` float32 rows."""

    C = C_EMBED

    def features(self, items: Sequence[object]) -> np.ndarray:
        """The embeddings as one ``(n, d)`` array."""
        return np.asarray(items, dtype=np.float32)
