"""Output text and log-probabilities of emulated tokens.

Each output token is one word of a small English vocabulary (with a leading space after the
first), drawn by a per-request ``random.Random`` seeded with the engine seed and the request
id, so an answer is reproducible. Log-probabilities are plausible, not modelled: the sampled
token's probability p is ``1 − Beta(1, 6)`` (mean ≈ 0.86, sometimes low, as a confident
model's), and ``top_logprobs`` alternatives share the rest, 1 − p, in geometrically
decreasing parts — so every logprob ≤ 0 and the listed probabilities sum to at most 1.
A *degraded* answer (``cues.py``) is flat instead: p uniform in 1–5 % and each alternative
1–4 %, so its top-k entropy bound is about 3.5–4.2 nats per token.
"""

from __future__ import annotations

import math
import random
from typing import Any

_WORDS = ("the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "with", "on",
          "be", "by", "this", "are", "or", "from", "at", "an", "which", "can", "model",
          "data", "value", "time", "system", "request", "token", "engine", "result", "code",
          "function", "return", "list", "answer", "first", "next", "each", "when", "not",
          "will", "all", "more", "one", "two", "new", "used", "other", "between", "we")


class TokenSource:
    """The output tokens of one request, produced in order (see the module docstring)."""

    def __init__(self, seed: int, request_id: str, degraded: bool = False):
        self._rng = random.Random(f"{seed}:{request_id}")
        self._count = 0
        self._degraded = degraded

    def next_tokens(self, n: int, top_n: int | None) -> list[dict[str, Any]]:
        """The next ``n`` tokens as OpenAI ``logprobs.content`` items (``token``,
        ``logprob``, ``bytes``, ``top_logprobs`` with ``top_n`` entries, empty if None)."""
        return [self._token(top_n) for _ in range(n)]

    def _token(self, top_n: int | None) -> dict[str, Any]:
        word = self._rng.choice(_WORDS)
        text = word if self._count == 0 else " " + word
        self._count += 1
        if self._degraded:
            p = self._rng.uniform(0.01, 0.05)
        else:
            p = max(1.0 - self._rng.betavariate(1.0, 6.0), 1e-6)
        item = _item(text, p)
        item["top_logprobs"] = self._alternatives(text, p, top_n or 0)
        return item

    def _alternatives(self, text: str, p: float, top_n: int) -> list[dict[str, Any]]:
        if top_n == 0:
            return []
        others = [w for w in _WORDS if w != text.strip()]
        picks = self._rng.sample(others, top_n - 1)
        rest, alts = 1.0 - p, [_item(text, p)]
        for i, w in enumerate(picks):
            share = self._rng.uniform(0.01, 0.04) if self._degraded else rest * 0.5 ** (i + 1)
            alts.append(_item((" " if text.startswith(" ") else "") + w, max(share, 1e-9)))
        return sorted(alts, key=lambda a: -a["logprob"])


def _item(text: str, p: float) -> dict[str, Any]:
    return {"token": text, "logprob": math.log(p), "bytes": list(text.encode())}


def content_of(tokens: list[dict[str, Any]]) -> str:
    """The text of ``tokens`` joined."""
    return "".join(t["token"] for t in tokens)


def strip_top(tokens: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tokens`` without their ``top_logprobs`` lists (when the client asked for none)."""
    return [{**t, "top_logprobs": []} for t in tokens]
