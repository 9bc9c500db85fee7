"""RouteLLM's evaluation tables (``../shared/data/routellm-evals``, Apache-2.0) as rows of
requests and per-model quality, for ``bench/router_value.py``.

Each set gives, per prompt, a weak model's (Mixtral-8x7B-Instruct) and a strong model's
(GPT-4 Turbo, ``gpt-4-1106-preview``) quality: MMLU and GSM8K a correctness flag (1/0),
MT-Bench a GPT-4 judge's 1–10 score per turn mapped to ``(score − 1) / 9`` as
``gate/outcomes.py`` does. MT-Bench's question texts come from ``../shared/data/mt-bench``;
a second turn is the conversation's two user turns (the first answer is not in the data).
RouteLLM's contaminated prompts (``*/contaminated_prompts.jsonl``: eval prompts found in its
routers' training data) are left out, as RouteLLM's own evaluation does.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmroute.gate.outcomes import row_request
from llmroute.types import ChatRequest

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
EVALS = DATA / "routellm-evals"
WEAK, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"


@dataclass(frozen=True)
class EvalSet:
    """One set: ``requests``, ``quality`` ``(n, 2)`` (weak, strong; 0–1), ``groups`` ``(n,)``
    (the question a row belongs to: an MT-Bench question's two turns share one) and
    ``subjects`` ``(n,)`` (MMLU's subject; the set's name elsewhere)."""

    name: str
    requests: list[ChatRequest]
    quality: np.ndarray
    groups: np.ndarray
    subjects: np.ndarray

    def take(self, index: np.ndarray) -> EvalSet:
        """The rows at ``index``."""
        return EvalSet(self.name, [self.requests[i] for i in index], self.quality[index],
                       self.groups[index], self.subjects[index])


def available() -> bool:
    """True when the RouteLLM tables are there."""
    return (EVALS / "mmlu" / "responses").is_dir()


def _contaminated(name: str) -> set[str]:
    path = EVALS / name / "contaminated_prompts.jsonl"
    return {json.loads(line)["eval_prompt"].strip() for line in path.read_text().splitlines()
            if line.strip()}


def _flag(value: str) -> float:
    return 1.0 if value.strip() == "True" else 0.0


def _csv_rows(path: Path, bad: set[str]) -> list[tuple[str, float, float]]:
    csv.field_size_limit(1 << 30)
    with path.open(newline="", encoding="utf-8") as f:
        return [(r["prompt"], _flag(r[WEAK]), _flag(r[STRONG])) for r in csv.DictReader(f)
                if r["prompt"].strip() not in bad]


def _build(name: str, rows: list[tuple[dict[str, object], float, float, str, str]]) -> EvalSet:
    requests = [row_request(obj, f"{name}:{i}") for i, (obj, *_rest) in enumerate(rows)]
    return EvalSet(name, requests, np.array([[w, s] for _, w, s, _, _ in rows]),
                   np.array([g for *_rest, g, _ in rows]), np.array([s for *_rest, s in rows]))


def mmlu() -> EvalSet:
    """14,042 MMLU questions less the contaminated ones; ``subjects`` from the file names."""
    bad = _contaminated("mmlu")
    rows = []
    for path in sorted((EVALS / "mmlu" / "responses").glob("mmlu_*.csv")):
        subject = path.stem.removeprefix("mmlu_")
        rows += [({"prompt": p}, w, s, p, subject) for p, w, s in _csv_rows(path, bad)]
    return _build("mmlu", rows)


def gsm8k() -> EvalSet:
    """GSM8K's 1,319 test problems less the contaminated ones."""
    rows = _csv_rows(EVALS / "gsm8k" / "gsm8k_responses.csv", _contaminated("gsm8k"))
    return _build("gsm8k", [({"prompt": p}, w, s, p, "gsm8k") for p, w, s in rows])


def mtbench() -> EvalSet:
    """MT-Bench's 80 questions × 2 turns (less the contaminated questions), judge scores."""
    bad = _contaminated("mt_bench")
    scores: dict[tuple[int, int, str], float] = {}
    for line in (EVALS / "mt_bench" / "judgements.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            scores[(int(r["question_id"]), int(r["turn"]), r["model"])] = float(r["score"])
    rows = []
    for line in (DATA / "mt-bench" / "question.jsonl").read_text().splitlines():
        q = json.loads(line)
        turns, qid = q["turns"], int(q["question_id"])
        if turns[0].strip() in bad:
            continue
        for t in (1, 2):
            if (qid, t, WEAK) not in scores or (qid, t, STRONG) not in scores:
                continue
            obj = {"messages": [{"role": "user", "content": x} for x in turns[:t]]}
            rows.append((obj, (scores[(qid, t, WEAK)] - 1) / 9,
                         (scores[(qid, t, STRONG)] - 1) / 9, str(qid), "mtbench"))
    return _build("mtbench", rows)


ALPACA = DATA / "alpaca-eval"
LADDER = (("FuseChat-Llama-3.2-1B-Instruct", 1.0), ("FuseChat-Llama-3.2-3B-Instruct", 3.0),
          ("FuseChat-Llama-3.1-8B-Instruct", 8.0), ("FuseChat-Gemma-2-9B-Instruct", 9.0))
"""The AlpacaEval ladder, cheapest first, with prices proportional to parameter count
(billions: 1, 3, 8, 9) — one family of fine-tunes, so size is what sets the price."""


def alpaca_ladder() -> tuple[list[ChatRequest], np.ndarray]:
    """AlpacaEval 2.0's 805 instructions (``../shared/data/alpaca-eval``; the instructions
    are CC BY-NC 4.0: read here to measure, never fitted into anything shipped) with each
    ``LADDER`` model's quality, the GPT-4 Turbo judge's weighted preference over the
    reference answer mapped to 0–1 (``preference − 1``): ``(requests, (n, 4))``, the rows
    every model answered."""
    names = [name for name, _ in LADDER]
    quality: dict[int, dict[str, float]] = {}
    with (ALPACA / "weighted_alpaca_eval_gpt4_turbo_preferences.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            if r["generator_2"] in names:
                quality.setdefault(int(r["instruction_index"]), {})[r["generator_2"]] = \
                    float(r["preference"]) - 1.0
    texts = {}
    for line in (ALPACA / "instructions.jsonl").read_text().splitlines():
        row = json.loads(line)
        texts[int(row["instruction_index"])] = row["instruction"]
    keep = [i for i in sorted(quality) if len(quality[i]) == len(names) and i in texts]
    return ([row_request({"prompt": texts[i]}, f"alpaca:{i}") for i in keep],
            np.array([[quality[i][n] for n in names] for i in keep]))
