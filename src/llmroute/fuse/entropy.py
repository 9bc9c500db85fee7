"""Per-token entropy from an engine's top-k logprobs, and the run trigger over it.

Estimator (nats). An engine reports the k most probable tokens, p_1 ≥ … ≥ p_k; the missing
mass m = 1 − Σ p_i lies on the other V − k tokens, each no more probable than p_k. Since
−p ln p ≥ p · ln(1/p_k) for every p ≤ p_k, the tail contributes at least m · ln(1/p_k), so

    H ≥ H_k = Σ_{i≤k} p_i ln(1/p_i) + m · ln(1/p_k)

is a lower bound on the true entropy, tight when the tail is as concentrated as the order
allows. We use H_k: it never overstates uncertainty, so the trigger errs on the side of
letting a model finish. (The other bound, m spread evenly over V − k tokens, needs the
vocabulary size and grows with ln V; it is not used.) With k = 1 the estimate is
(1 − p_1) · ln(1/p_1) + p_1 ln(1/p_1) = ln(1/p_1), the token's surprisal under the argmax.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def entropy_nats(logprobs: Sequence[float]) -> float:
    """The lower-bound entropy H_k (nats, ≥ 0) of a token whose top-k alternatives have
    natural-log probabilities ``logprobs`` (any order; at least one). Raises ValueError on
    an empty sequence."""
    if not logprobs:
        raise ValueError("entropy needs at least one logprob")
    probs = sorted((math.exp(min(lp, 0.0)) for lp in logprobs), reverse=True)
    known = sum(p * -math.log(p) for p in probs if p > 0)
    missing = max(0.0, 1.0 - sum(probs))
    floor = probs[-1]
    tail = missing * -math.log(floor) if floor > 0 else 0.0
    return known + tail


def chunk_entropies(chunk: dict[str, Any]) -> tuple[float, ...]:
    """Entropies (nats) of the new tokens in one streamed chat ``chunk`` (its first choice):
    one per entry of ``logprobs.content`` that has ``top_logprobs``; ``()`` when none."""
    choices = chunk.get("choices") or []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    content = (choice.get("logprobs") or {}).get("content") or []
    return tuple(entropy_nats(alts) for alts in _alternatives(content) if alts)


def _alternatives(content: Iterable[Any]) -> Iterable[list[float]]:
    for entry in content:
        if isinstance(entry, dict):
            tops = entry.get("top_logprobs") or []
            yield [float(t["logprob"]) for t in tops if isinstance(t, dict) and "logprob" in t]


class EntropyRun:
    """Counts consecutive tokens above ``threshold_nats``; ``window`` keeps the last
    ``keep`` entropies as evidence. Fires when the run reaches ``run_tokens``."""

    def __init__(self, threshold_nats: float, run_tokens: int, keep: int = 32):
        self.threshold_nats = threshold_nats
        self.run_tokens = run_tokens
        self._keep = keep
        self._run = 0
        self.window: tuple[float, ...] = ()

    def push(self, entropy: float) -> bool:
        """Add one token's entropy; True when the run of high-entropy tokens is long enough."""
        self.window = (*self.window, entropy)[-self._keep:]
        self._run = self._run + 1 if entropy > self.threshold_nats else 0
        return self._run >= self.run_tokens

    @property
    def length(self) -> int:
        """Tokens in the current run of high-entropy tokens (0 after a calm token)."""
        return self._run
