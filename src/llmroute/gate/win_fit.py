"""Fitting the win head (``win.py``) on outcome rows (``outcomes.py``). Blocking: run it in
a thread or a command.

Per cheaper pool of the ladder the label is "answers at least as well as the reference
pool". Each part is an L2-regularised logistic regression (scikit-learn): the dense part
(lbfgs) over the standardised dense features, the n-gram part (liblinear) over the hashed
n-gram vector. Each part's inverse regularisation ``C`` is chosen from a small grid
(``DENSE_C``, ``NGRAM_C``) by the mean log-loss of a ``FOLDS``-fold stratified
cross-validation on the fit rows alone, and the out-of-fold probabilities of the chosen
``C`` (both parts' logits averaged) become the head's ``calibration`` (what ``rank``
reads): nothing is chosen on data the head is later scored on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

from llmroute.errors import ConfigError
from llmroute.gate.complexity import ComplexityScorer
from llmroute.gate.compress import compress
from llmroute.gate.model import GateModel
from llmroute.gate.rules import RulesClassifier
from llmroute.gate.verdict import first_stage
from llmroute.gate.win import WinHead, dense_features
from llmroute.types import ChatRequest

DENSE_C = (0.01, 0.1, 1.0)
NGRAM_C = (0.1, 1.0, 10.0)
FOLDS = 3
MAX_ITER = 2000
SEED = 0


@dataclass(frozen=True)
class Rows:
    """Fit rows as the gate sees them: ``dense`` ``(n, f)`` (``win.dense_features``) and
    ``ngrams`` ``(n, 2·2^18)``, the hashed halves each L2-normalised (``NgramHead.features``)."""

    dense: np.ndarray
    ngrams: sparse.csr_matrix

    def take(self, index: np.ndarray) -> Rows:
        """The rows at ``index``."""
        return Rows(self.dense[index], self.ngrams[index])


def gate_rows(model: GateModel, requests: Sequence[ChatRequest]) -> Rows:
    """The features of ``requests`` through the gate's ``model`` as a served request gets
    them: compression, first stage (n-gram head, rules, structure) and complexity. The
    encoder's embedding is not read: the gate asks its encoder only for the requests its
    first stage is unsure of, and the head must answer for every request."""
    rules, scorer = RulesClassifier(), ComplexityScorer()
    squeezed = [compress(r) for r in requests]
    dense = []
    for request, c in zip(requests, squeezed):
        scores = rules.scores(request, c.text, c.document)
        p = first_stage(model.fast_proba(c.text), scores, model.classes, c)
        level = scorer.score(c.text, request.prompt_tokens, scores, c.turns)
        dense.append(dense_features(None, p, level, c))
    return Rows(np.stack(dense), model.fast.features([c.text for c in squeezed]))


def fit_win(rows: Rows, quality: np.ndarray, pools: Sequence[str], classes: Sequence[str],
            encoder: str | None, embed_dim: int, *, ngrams: bool = True,
            key: str = "") -> WinHead:
    """The win head for ladder ``pools`` fitted on ``rows`` with per-pool ``quality``
    ``(n, len(pools))`` (0–1); ``ngrams``: fit the n-gram part too. Raises ConfigError when
    a cheaper pool's label has one class only."""
    scaler = StandardScaler().fit(rows.dense)
    mean, scale = scaler.mean_, scaler.scale_
    x = scaler.transform(rows.dense)
    parts = [_pool(x, rows.ngrams if ngrams else None, quality[:, j] >= quality[:, -1],
                   pools[j]) for j in range(len(pools) - 1)]
    dense_w = np.stack([p.coef / scale for p in parts], axis=1)
    dense_b = np.array([p.intercept - float(np.dot(p.coef, mean / scale)) for p in parts])
    ngram_w = np.stack([p.ngram_coef for p in parts], axis=1) if ngrams else None
    ngram_b = np.array([p.ngram_intercept for p in parts]) if ngrams else None
    calibration = np.sort(np.stack([p.oof for p in parts], axis=1), axis=0)
    return WinHead(tuple(pools), tuple(classes), encoder, embed_dim, dense_w, dense_b,
                   ngram_w, ngram_b, calibration, key)


@dataclass(frozen=True)
class _Fitted:
    """One pool's two parts: the dense ``coef``/``intercept`` (standardised features), the
    n-gram ones (zeros without that part) and the out-of-fold probabilities ``oof``."""

    coef: np.ndarray
    intercept: float
    ngram_coef: np.ndarray
    ngram_intercept: float
    oof: np.ndarray


def _pool(x: np.ndarray, ngrams: sparse.csr_matrix | None, label: np.ndarray,
          pool: str) -> _Fitted:
    y = label.astype(int)
    if len(set(y.tolist())) < 2:
        raise ConfigError(f"outcomes.{pool}: one class only, nothing to learn")
    folds = list(StratifiedKFold(min(FOLDS, int(np.bincount(y).min())), shuffle=True,
                                 random_state=SEED).split(x, y))
    dense, dense_oof = _choose(x, y, folds, DENSE_C, "lbfgs")
    if ngrams is None:
        return _Fitted(dense.coef_[0], float(dense.intercept_[0]), np.zeros(0), 0.0,
                       _sigmoid(dense_oof))
    gram, gram_oof = _choose(ngrams, y, folds, NGRAM_C, "liblinear")
    return _Fitted(dense.coef_[0], float(dense.intercept_[0]), gram.coef_[0],
                   float(gram.intercept_[0]), _sigmoid(0.5 * dense_oof + 0.5 * gram_oof))


def _choose(x: np.ndarray | sparse.csr_matrix, y: np.ndarray,
            folds: list[tuple[np.ndarray, np.ndarray]], grid: Sequence[float], solver: str
            ) -> tuple[LogisticRegression, np.ndarray]:
    """The model refitted on every row with the ``C`` of ``grid`` whose out-of-fold
    log-loss over ``folds`` is lowest, and that ``C``'s out-of-fold logits."""
    best: tuple[float, float, np.ndarray] | None = None
    for c in grid:
        logits = np.zeros(len(y))
        for train, test in folds:
            model = _model(c, solver).fit(x[train], y[train])
            logits[test] = model.decision_function(x[test])
        loss = float(np.mean(np.logaddexp(0.0, -np.where(y == 1, logits, -logits))))
        if best is None or loss < best[0]:
            best = (loss, c, logits)
    assert best is not None
    return _model(best[1], solver).fit(x, y), best[2]


def _model(c: float, solver: str) -> LogisticRegression:
    return LogisticRegression(C=c, solver=solver, max_iter=MAX_ITER)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))
