"""Router value: how many strong-model calls the win head saves at 95 % of the strong model's
quality, on RouteLLM's own evaluation data, beside random routing and the oracle.

Data (``../shared/data/routellm-evals``, Apache-2.0; ``bench/lib/routellm.py``): MMLU
(flags), GSM8K (flags) and MT-Bench (GPT-4 judge scores), for Mixtral-8x7B (weak) and
GPT-4 Turbo (strong), RouteLLM's contaminated prompts left out. No engines: each prompt goes
through the real gate's first stage (n-gram head, rules, structure, complexity; no encoder)
and the real win head (``gate/win.py``, fitted by ``gate/win_fit.py``); the outcome of
sending it weak or strong is read from the data.

Routing a set at strong share ``s``: the ``s·n`` prompts with the lowest predicted
probability that the weak model answers as well go to the strong model. Quality is the mean
of the chosen models' qualities. ``cut_at_95`` is ``1 − s`` for the smallest ``s`` whose
quality is at least 0.95 × the always-strong quality (the share of strong calls saved).
``apgr`` is RouteLLM's average performance gap recovered, ``(q(s) − q_weak) / (q_strong −
q_weak)`` averaged over every ``s = k/n`` (the exact integral; RouteLLM uses 10 bins).
Random routing's expected quality at ``s`` is ``q_weak + s·(q_strong − q_weak)`` (its
``apgr`` is 0.5); the oracle sends strong exactly the prompts where strong is better.

- In-domain (``strong_call_cut_at_95_*``, ``apgr_*``): K-fold cross-validation grouped by
  question (an MT-Bench question's two turns stay together), every prompt scored by a head
  fitted on the other folds; MMLU also leave-subject-out (``mmlu_loso_cut_at_95``: folds of
  whole subjects).
- Transfer (``transfer_cut_at_95_*``): fitted on the other two sets, scored on this one —
  the fair comparison with RouteLLM's published cuts (0.45 MMLU, 0.35 GSM8K, 0.85
  MT-Bench at 95 % of GPT-4's quality, from its routers trained on Chatbot Arena data:
  Ong et al. 2024, lmsys.org/blog/2024-07-01-routellm), which never saw these sets.
- AlpacaEval ladder (``ladder_*``): four fine-tunes of one family at 1B, 3B, 8B and 9B
  parameters, priced in proportion to their size (``routellm.LADDER``), quality = the
  GPT-4 Turbo judge's preference over its reference answer (0–1) on AlpacaEval 2.0's 805
  instructions; the head (one probability per cheaper model: "answers at least as well as
  the 9B") out of fold (K-fold), each prompt sent to the cheapest model whose probability
  clears a threshold, the threshold swept. ``ladder_cost_cut_at_95``: 1 − the cheapest
  mean price per prompt at ≥ 95 % of the best single model's quality, divided by that
  model's price; ``ladder_quality_at_cut`` that quality; ``ladder_best_single_at_equal_cost``
  the quality of the best single model no dearer than that mean price.
- ``head_p50_ms``: the win head's own time per request on one core (dense features and
  both parts' dot products of one prompt), beside ``classify_p50_ms``, the gate's first
  stage for the same prompt (compression, n-gram head, rules, complexity).

The gate's shipped utterances hold a few capped MT-Bench and GSM8K rows (their intent
labels only; ``bench/gate_public_rows.py``), so the intent probabilities the head reads
have seen those prompts' wording; nothing fitted here saw a scored prompt's outcome.

``--quick``: 4,000 MMLU questions (seeded sample), 3 folds; ``--smoke``: 600 MMLU, 300
GSM8K, 2 folds (the code path only). A plot of quality against strong share goes to
``bench/results/router_value.png``. Last line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.model_selection import GroupKFold, KFold

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

import routellm  # noqa: E402
from routellm import EvalSet  # noqa: E402

from llmroute.gate.examples import shipped_utterances  # noqa: E402
from llmroute.gate.heads_cache import heads_dir  # noqa: E402
from llmroute.gate.model import GateModel, build_model  # noqa: E402
from llmroute.gate.win import WinHead  # noqa: E402
from llmroute.gate.win_fit import Rows, fit_win, gate_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PUBLISHED = {"mmlu": 0.45, "gsm8k": 0.35, "mtbench": 0.85}
"""RouteLLM's published cuts of GPT-4 calls at 95 % of GPT-4's quality (its best router)."""
TARGETS = {"mmlu": 0.50, "gsm8k": 0.40, "mtbench": 0.85}
POOLS = ("weak", "strong")
SEED = 0


def curve(p: np.ndarray, quality: np.ndarray) -> np.ndarray:
    """Quality ``(n + 1,)`` when the ``k`` rows with the lowest ``p`` (probability that the
    weak model answers as well) go strong, for ``k = 0..n``; ``quality`` ``(n, 2)``."""
    order = np.argsort(p, kind="stable")
    gain = quality[order, 1] - quality[order, 0]
    return (quality[:, 0].sum() + np.concatenate([[0.0], np.cumsum(gain)])) / len(p)


def cut_at(q: np.ndarray, target: float) -> float:
    """``1 − k/n`` for the smallest ``k`` with ``q[k] ≥ target`` (0 when none reaches it)."""
    hit = np.flatnonzero(q >= target - 1e-12)
    return 0.0 if not hit.size else 1.0 - hit[0] / (len(q) - 1)


def scores(p: np.ndarray, quality: np.ndarray) -> dict[str, float]:
    """``cut`` at 95 %, ``apgr``, and the random router's and the oracle's cuts."""
    weak, strong = quality.mean(axis=0)
    q = curve(p, quality)
    gap = strong - weak
    shares = np.linspace(0.0, 1.0, len(q))
    random_q = weak + shares * gap
    oracle_q = curve(quality[:, 0] - quality[:, 1], quality)
    return {"cut": cut_at(q, 0.95 * strong), "random_cut": cut_at(random_q, 0.95 * strong),
            "oracle_cut": cut_at(oracle_q, 0.95 * strong),
            "apgr": float(np.mean((q - weak) / gap)) if gap > 0 else 1.0,
            "weak": float(weak), "strong": float(strong)}


def fit(rows: Rows, quality: np.ndarray, model: GateModel) -> WinHead:
    """The win head fitted on ``rows`` (no encoder: the first stage's features)."""
    return fit_win(rows, quality, POOLS, model.classes, None, 0)


def predict(head: WinHead, rows: Rows) -> np.ndarray:
    """The probability ``(n,)`` that the weak model answers as well, per row."""
    return 1.0 / (1.0 + np.exp(-head.batch_logits(rows.dense, rows.ngrams)[:, 0]))


def cross_val(data: EvalSet, rows: Rows, model: GateModel, folds: int, groups: np.ndarray
              ) -> np.ndarray:
    """Out-of-fold probabilities over ``folds`` folds of ``groups``."""
    p = np.zeros(len(data.requests))
    for train, test in GroupKFold(folds).split(rows.dense, groups=groups):
        p[test] = predict(fit(rows.take(train), data.quality[train], model), rows.take(test))
    return p


def stack(parts: list[Rows]) -> Rows:
    """The rows of ``parts`` one after another."""
    from scipy import sparse
    return Rows(np.concatenate([r.dense for r in parts]),
                sparse.vstack([r.ngrams for r in parts], format="csr"))


def sample(data: EvalSet, n: int | None) -> EvalSet:
    """A seeded sample of ``n`` rows (all when None or more)."""
    if n is None or n >= len(data.requests):
        return data
    return data.take(np.sort(np.random.default_rng(SEED).choice(len(data.requests), n,
                                                                replace=False)))


def head_timing(model: GateModel, head: WinHead, data: EvalSet, n: int) -> dict[str, float]:
    """p50 ms of the head alone and of the gate's first stage, one prompt at a time."""
    from llmroute.gate.complexity import ComplexityScorer
    from llmroute.gate.compress import compress
    from llmroute.gate.rules import RulesClassifier
    from llmroute.gate.verdict import first_stage
    from llmroute.gate.win import dense_features
    rules, scorer = RulesClassifier(), ComplexityScorer()
    head_ms, first_ms = [], []
    for request in data.requests[:n]:
        t0 = time.perf_counter()
        c = compress(request)
        s = rules.scores(request, c.text, c.document)
        probs, halves = model.fast_scores(c.text)
        p = first_stage(probs, s, model.classes, c)
        level = scorer.score(c.text, request.prompt_tokens, s, c.turns)
        t1 = time.perf_counter()
        head.predict(dense_features(None, p, level, c), halves)
        t2 = time.perf_counter()
        first_ms.append((t1 - t0) * 1000)
        head_ms.append((t2 - t1) * 1000)
    return {"head_p50_ms": round(statistics.median(head_ms), 4),
            "classify_p50_ms": round(statistics.median(first_ms), 4)}


def plot(curves: dict[str, dict[str, np.ndarray]], path: Path) -> None:
    """Quality against strong share, one panel per set."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 4))
    for ax, (name, lines) in zip(np.atleast_1d(axes), curves.items()):
        for label, q in lines.items():
            ax.plot(np.linspace(0, 1, len(q)), q, label=label)
        strong = lines["llmroute"][-1]
        ax.axhline(0.95 * strong, color="grey", linestyle=":", label="95 % of strong")
        ax.set(title=name, xlabel="share of strong calls", ylabel="quality")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ladder(model: GateModel, folds: int, smoke: bool) -> dict[str, float]:
    """The AlpacaEval ladder figures (module docstring)."""
    requests, quality = routellm.alpaca_ladder()
    if smoke:
        requests, quality = requests[:300], quality[:300]
    rows, k = gate_rows(model, requests), quality.shape[1]
    pools = tuple(name for name, _ in routellm.LADDER)
    prices = np.array([price for _, price in routellm.LADDER])
    p = np.zeros((len(requests), k - 1))
    for train, test in KFold(folds, shuffle=True, random_state=SEED).split(rows.dense):
        head = fit_win(rows.take(train), quality[train], pools, model.classes, None, 0)
        part = rows.take(test)
        p[test] = 1.0 / (1.0 + np.exp(-head.batch_logits(part.dense, part.ngrams)))
    means = quality.mean(axis=0)
    best = int(np.argmax(means))
    target, points = 0.95 * means[best], []
    for t in np.unique(np.concatenate([p.ravel(), [1.1]])):
        clears = p >= t
        choice = np.where(clears.any(axis=1), clears.argmax(axis=1), k - 1)
        points.append((prices[choice].mean(), quality[np.arange(len(choice)), choice].mean()))
    cost, q = min((c, q) for c, q in points if q >= target - 1e-12)
    single = max((m for m, price in zip(means, prices) if price <= cost + 1e-12),
                 default=0.0)
    print(f"ladder   n={len(requests):6}  cost cut@95 {1 - cost / prices[best]:.3f} "
          f"(quality {q:.3f} vs best {means[best]:.3f}; best single model at that cost "
          f"{single:.3f})")
    return {"ladder_cost_cut_at_95": round(1 - cost / prices[best], 4),
            "ladder_quality_at_cut": round(float(q), 4),
            "ladder_best_quality": round(float(means[best]), 4),
            "ladder_best_single_at_equal_cost": round(float(single), 4),
            "ladder_single_quality": {n: round(float(m), 4) for n, m in zip(pools, means)}}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of the module docstring; returns the RESULT."""
    folds = 2 if args.smoke else 3 if args.quick else 5
    mmlu_n = 600 if args.smoke else 4000 if args.quick else None
    sets = {"mmlu": sample(routellm.mmlu(), mmlu_n),
            "gsm8k": sample(routellm.gsm8k(), 300 if args.smoke else None),
            "mtbench": routellm.mtbench()}
    model = build_model(shipped_utterances(), None, cache_dir=heads_dir())
    rows = {name: gate_rows(model, data.requests) for name, data in sets.items()}
    result: dict[str, Any] = {"folds": folds, "n": {k: len(v.requests) for k, v in sets.items()}}
    curves: dict[str, dict[str, np.ndarray]] = {}
    for name, data in sets.items():
        p = cross_val(data, rows[name], model, folds, data.groups)
        s = scores(p, data.quality)
        others = [k for k in sets if k != name]
        head = fit(stack([rows[k] for k in others]),
                   np.concatenate([sets[k].quality for k in others]), model)
        t = scores(predict(head, rows[name]), data.quality)
        result |= {f"strong_call_cut_at_95_{name}": round(s["cut"], 4),
                   f"random_cut_at_95_{name}": round(s["random_cut"], 4),
                   f"oracle_cut_at_95_{name}": round(s["oracle_cut"], 4),
                   f"apgr_{name}": round(s["apgr"], 4),
                   f"transfer_cut_at_95_{name}": round(t["cut"], 4),
                   f"transfer_apgr_{name}": round(t["apgr"], 4),
                   f"quality_weak_{name}": round(s["weak"], 4),
                   f"quality_strong_{name}": round(s["strong"], 4)}
        gap = data.quality[:, 1].mean() - data.quality[:, 0].mean()
        curves[name] = {"llmroute": curve(p, data.quality),
                        "random": data.quality[:, 0].mean() + np.linspace(0, 1, len(p) + 1) * gap,
                        "oracle": curve(data.quality[:, 0] - data.quality[:, 1],
                                        data.quality)}
        print(f"{name:8} n={len(p):6}  cut@95 {s['cut']:.3f} (random {s['random_cut']:.3f}, "
              f"oracle {s['oracle_cut']:.3f}, published {PUBLISHED[name]:.2f})  "
              f"apgr {s['apgr']:.3f}  transfer cut {t['cut']:.3f} apgr {t['apgr']:.3f}",
              flush=True)
    mmlu = sets["mmlu"]
    loso = scores(cross_val(mmlu, rows["mmlu"], model, folds, mmlu.subjects), mmlu.quality)
    result["mmlu_loso_cut_at_95"] = round(loso["cut"], 4)
    result["mmlu_loso_apgr"] = round(loso["apgr"], 4)
    print(f"mmlu leave-subject-out: cut@95 {loso['cut']:.3f} apgr {loso['apgr']:.3f}")
    if routellm.ALPACA.is_dir():
        result |= ladder(model, folds, args.smoke)
    head = fit(rows["gsm8k"], sets["gsm8k"].quality, model)
    result |= head_timing(model, head, mmlu, 300 if args.smoke else 2000)
    result["targets_met"] = {k: bool(result[f"strong_call_cut_at_95_{k}"] >= v and
                                     result[f"strong_call_cut_at_95_{k}"]
                                     >= 1.5 * result[f"random_cut_at_95_{k}"])
                             for k, v in TARGETS.items()}
    result["transfer_ahead_of_published"] = [k for k, v in PUBLISHED.items()
                                             if result[f"transfer_cut_at_95_{k}"] >= v]
    plot(curves, RESULTS / "router_value.png")
    return result


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run, print ``RESULT {json}``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4,000 MMLU questions, 3 folds")
    p.add_argument("--smoke", action="store_true", help="a few hundred rows, 2 folds")
    args = p.parse_args(argv)
    if not routellm.available():
        print("RESULT " + json.dumps({"skipped": f"no data at {routellm.EVALS}"}))
        return 0
    print("RESULT " + json.dumps(run(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
