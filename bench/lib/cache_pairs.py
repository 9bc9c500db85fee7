"""The answer cache's quality measurements for ``bench/cache.py``: every pair goes through
the real ``AnswerCache`` (prompt ``a`` stored under a scope of its own, prompt ``b`` looked
up), with the gate's real verdicts and the gate encoder's vectors.

``Judged`` per pair: the cosine similarity, whether the guarded cache served ``b`` and, when
it did not, why (the lookup's reason). A similarity-only cache (the peers' design: same
encoder, a threshold alone) serves a pair when the similarity is at least its threshold.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from llmroute.cache.answers import AnswerCache, Scope
from llmroute.config.cache import CacheConfig
from llmroute.gate.semantic import SemanticGate
from llmroute.types import ChatRequest, Intent

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
ANSWER = {"object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "stored"},
     "finish_reason": "stop"}]}


class Judged(NamedTuple):
    """One pair: ``label`` (1: same meaning), ``similarity``, ``served``, ``reason``."""

    label: int
    similarity: float
    served: bool
    reason: str


def request(text: str, rid: str) -> ChatRequest:
    """A one-turn chat request of ``text``."""
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return ChatRequest("chat", body, "m", False, text, len(text) // 4 + 1, None, rid)


async def verdicts(gate: SemanticGate, texts: list[str]) -> list[Intent]:
    """The gate's verdict of every text, each with the encoder's vector (``gate.embed`` when
    the verdict carried none), micro-batched by the gate."""
    async def one(i: int, text: str) -> Intent:
        req = request(text, f"v{i}")
        intent = await gate.classify(req)
        return intent if intent.embedding is not None else replace(
            intent, embedding=await gate.embed(req))
    out: list[Intent] = []
    for start in range(0, len(texts), 256):
        out += await asyncio.gather(*(one(start + i, t)
                                      for i, t in enumerate(texts[start:start + 256])))
    return out


async def judge(cfg: CacheConfig, pairs: list[tuple[str, str, int]],
                intents: dict[str, Intent]) -> list[Judged]:
    """Each pair through one cache at ``cfg``: ``a`` stored, ``b`` looked up."""
    async def no_embed(_: ChatRequest) -> None:
        return None
    cache = AnswerCache(cfg.model_copy(update={"max_entries": len(pairs) + 1,
                                               "max_bytes": 2**31}), no_embed, lambda: 0.0)
    out = []
    for i, (a, b, label) in enumerate(pairs):
        scope = Scope("", "", f"pair-{i}")
        ia, ib = intents[a], intents[b]
        found = await cache.lookup(request(a, f"a{i}"), ia, scope, {})
        cache.store(found, request(a, f"a{i}"), ia, scope, ANSWER)
        got = await cache.lookup(request(b, f"b{i}"), ib, scope, {})
        sim = float(np.dot(ia.embedding, ib.embedding)) if a != b else 1.0
        out.append(Judged(label, sim, got.entry is not None, got.reason))
    return out


def rates(judged: list[Judged], threshold: float | None = None) -> tuple[float, float]:
    """``(false_hit_rate, recall)``: served share of label-0 and label-1 pairs (the guarded
    verdicts; with ``threshold``, the similarity-only cache's)."""
    def hit(j: Judged) -> bool:
        return j.served if threshold is None else j.similarity >= threshold
    neg = [hit(j) for j in judged if j.label == 0]
    pos = [hit(j) for j in judged if j.label == 1]
    return (sum(neg) / max(len(neg), 1), sum(pos) / max(len(pos), 1))


def threshold_for_recall(judged: list[Judged], recall: float) -> float:
    """The similarity-only threshold whose recall on ``judged`` is closest to ``recall``
    from above (the highest threshold reaching it)."""
    sims = sorted((j.similarity for j in judged if j.label == 1), reverse=True)
    if not sims:
        return 1.0
    k = max(1, int(np.ceil(recall * len(sims))))
    return sims[min(k, len(sims)) - 1]


def paws(lang: str, split: str, limit: int | None, rng: random.Random
         ) -> list[tuple[str, str, int]]:
    """PAWS-X pairs ``(a, b, label)`` of one language and split (``limit``: a random
    sample)."""
    rows = [json.loads(line) for line in
            (DATA / "paraphrase-pairs" / f"paws-x-{lang}.jsonl").open(encoding="utf-8")]
    pairs = [(r["a"], r["b"], r["label"]) for r in rows if r["split"] == split]
    return rng.sample(pairs, limit) if limit and limit < len(pairs) else pairs


_NUM = re.compile(r"\d+(?:\.\d+)?")
_CAP = re.compile(r"(?<=[a-z,;] )[A-Z][a-z]{2,}")
NAMES = ("Germany", "Tokyo", "Alice", "Brazil", "Oxford", "Microsoft", "Kenya", "Lisbon")
REPHRASINGS = ("Please answer this: {}", "{} Thanks!", "Question: {}", "{}\n\nBe precise.")


def questions(limit: int, rng: random.Random) -> list[str]:
    """Real user questions: GSM8K test questions, MT-Bench first turns and MT-Bench-101
    user turns (a random sample of ``limit``)."""
    def lines(path: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.open(encoding="utf-8")]
    found = [r["question"] for r in lines(DATA / "gsm8k" / "test.jsonl")]
    found += [t for r in lines(DATA / "mt-bench" / "question.jsonl") for t in r["turns"]]
    found += [h["user"] for r in lines(DATA / "mt-bench-101" / "mtbench101.jsonl")
              for h in r["history"]]
    found = sorted(set(found))
    return rng.sample(found, min(limit, len(found)))


def swapped(text: str, rng: random.Random) -> str | None:
    """``text`` with one number (×10 or +1), or else one mid-sentence capitalised name,
    changed; None when it has neither."""
    numbers = list(_NUM.finditer(text))
    if numbers:
        m = rng.choice(numbers)
        value = m[0]
        new = value + "0" if rng.random() < 0.5 else str(int(float(value)) + 1)
        return text[:m.start()] + new + text[m.end():]
    names = list(_CAP.finditer(text))
    if names:
        m = rng.choice(names)
        new = next(n for n in rng.sample(NAMES, len(NAMES)) if n != m[0])
        return text[:m.start()] + new + text[m.end():]
    return None


def rephrased(text: str, rng: random.Random) -> str:
    """``text`` in a template that keeps every word, number and name of it (a request
    framed differently: ``REPHRASINGS``)."""
    return rng.choice(REPHRASINGS).format(text)
