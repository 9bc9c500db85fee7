"""Scoring a gate against labelled data: per-intent precision/recall/F1, macro-F1 and a
confusion matrix (scikit-learn's metrics), plus a plain-text report.

Macro-F1 averages F1 over the intents that occur in the truth (an intent nobody asked for
cannot be recalled); predictions of other intents still count as errors.

Strict and lenient: a labelled row may name ``also`` intents, other answers people accept on
a boundary they disagree on (docs/intents.md). The strict score counts only ``intent``;
the lenient one (``lenient``) takes a prediction found in the row's ``also`` as that row's
truth, so it counts as a hit for the predicted intent and not as a miss for the labelled one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Score:
    """``per_intent``: intent → (precision, recall, F1, support); ``labels`` the matrix
    order (truth labels first, then any other predicted label); ``matrix[i][j]`` counts
    truth ``labels[i]`` predicted as ``labels[j]``; ``n`` examples."""

    macro_f1: float
    per_intent: dict[str, tuple[float, float, float, int]]
    labels: tuple[str, ...]
    matrix: np.ndarray
    n: int


def score(truth: Sequence[str], pred: Sequence[str]) -> Score:
    """Score predictions ``pred`` against ``truth`` (same length, ≥ 1)."""
    present = sorted(set(truth))
    labels = tuple(present + sorted(set(pred) - set(present)))
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    p, r, f, s = precision_recall_fscore_support(truth, pred, labels=present, zero_division=0)
    per = {k: (float(p[i]), float(r[i]), float(f[i]), int(s[i])) for i, k in enumerate(present)}
    matrix = confusion_matrix(truth, pred, labels=list(labels))
    return Score(float(np.mean(f)), per, labels, matrix, len(truth))


def lenient(truth: Sequence[str], pred: Sequence[str],
            also: Sequence[Sequence[str]]) -> list[str]:
    """The truth labels with each row whose prediction is among its ``also`` intents set to
    that prediction (same length as ``truth``); score them with ``score`` for the lenient
    macro-F1."""
    return [p if p in extra else t for t, p, extra in zip(truth, pred, also, strict=True)]


def report(s: Score) -> str:
    """A human table: per-intent P/R/F1/support, macro-F1, then the confusion matrix."""
    lines = [f"{'intent':<18}{'precision':>10}{'recall':>10}{'F1':>8}{'n':>7}"]
    lines += [f"{k:<18}{p:>10.3f}{r:>10.3f}{f:>8.3f}{n:>7}" for k, (p, r, f, n)
              in s.per_intent.items()]
    lines.append(f"{'macro-F1':<18}{'':>20}{s.macro_f1:>8.3f}{s.n:>7}")
    short = [k[:5] for k in s.labels]
    lines.append("confusion (rows: truth, columns: predicted)")
    lines.append(f"{'':<18}" + "".join(f"{k:>6}" for k in short))
    for i, k in enumerate(s.labels):
        if k in s.per_intent:
            lines.append(f"{k:<18}" + "".join(f"{int(v):>6}" for v in s.matrix[i]))
    return "\n".join(lines)
