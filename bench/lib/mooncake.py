"""The Mooncake conversation trace as prompts that share exactly what the trace says they
share (``bench/prefix.py``).

Trace: ``../shared/data/mooncake-traces/conversation_trace.jsonl`` (Qin et al., "Mooncake:
A KVCache-centric Disaggregated Architecture for LLM Serving", FAST 2025; Apache-2.0): one
hour of Kimi's conversation requests, each with its arrival (ms), input and output tokens
and ``hash_ids``, one id per 512-token block of the prompt, equal leading ids meaning a
shared prefix (the last block may be partial).

Each hash id becomes a fixed block of text the router's token estimate and the emulator
count as exactly 512 tokens (1,536 ASCII characters: ``blocks.CHARS_PER_TOKEN`` = 3), the
same text every time that id appears; a prompt is its blocks' texts in order, cut to its
input length. Requests that share leading ids therefore share exactly those leading
characters — whole engine blocks (16 tokens = 48 characters) and whole router keys
(256 tokens = 768 characters), since 512 is a multiple of both — and nothing after them.

Sampling keeps whole conversations: a request belongs to the conversation named by its
first block after the shared system prompt (``hash_ids[1]``; every request of the trace
starts with id 0), and a conversation is kept when the hash of that id falls in the
sample, so every turn of a kept conversation is replayed (its reuse intact) while the
request count shrinks.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from llmroute.text import MESSAGE_OVERHEAD_TOKENS

TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "mooncake-traces"
BLOCK_TOKENS = 512
BLOCK_CHARS = 3 * BLOCK_TOKENS


@dataclass(frozen=True, slots=True)
class Row:
    """One request: ``t`` seconds since the trace start, tokens in and out, block ids."""

    t: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]

    @property
    def conversation(self) -> int:
        """The conversation's id: its first block after the shared system prompt."""
        return self.hash_ids[1] if len(self.hash_ids) > 1 else -1 - self.hash_ids[0]


def load(root: Path = TRACE) -> list[Row]:
    """Every request of the conversation trace, in arrival order. Raises FileNotFoundError
    when absent."""
    rows = []
    with (root / "conversation_trace.jsonl").open() as f:
        for line in f:
            r = json.loads(line)
            rows.append(Row(r["timestamp"] / 1000.0, r["input_length"],
                            max(r["output_length"], 1), tuple(r["hash_ids"])))
    return rows


def sample(rows: list[Row], n: int, max_tokens: int, seed: int = 0) -> list[Row]:
    """About ``n`` requests: whole conversations drawn from the start of the trace (1 in
    k of them, k chosen so that the first ``n·k`` requests give ``n``), leaving out requests
    whose input + output exceeds ``max_tokens`` (the engines' context)."""
    fitting = [r for r in rows if r.input_tokens + r.output_tokens <= max_tokens]
    for k in range(max(len(fitting) // max(n, 1), 1), 0, -1):
        kept = [r for r in fitting[:n * k] if _drawn(r.conversation, k, seed)]
        if len(kept) >= n * 0.9 or k == 1:
            return kept[:n]
    return fitting[:n]


def _drawn(conversation: int, k: int, seed: int) -> bool:
    digest = hashlib.blake2b(f"{seed}:{conversation}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % k == 0


@dataclass
class Prompts:
    """Picklable ``(tokens, index) -> text`` for the load generator: request ``index``'s
    prompt from its ``hash_ids`` (module docstring), block texts made once each."""

    hash_ids: list[tuple[int, ...]]
    _texts: dict[int, str] = field(default_factory=dict, repr=False)

    def __call__(self, tokens: int, index: int) -> str:
        """The user message of request ``index`` whose prompt is ``tokens`` tokens."""
        chars = 3 * max(tokens - MESSAGE_OVERHEAD_TOKENS, 1)
        text = "".join(self._block(h) for h in self.hash_ids[index])
        return text[:chars]

    def _block(self, hash_id: int) -> str:
        text = self._texts.get(hash_id)
        if text is None:
            parts = [hashlib.blake2b(f"{hash_id}:{j}".encode(), digest_size=32).hexdigest()
                     for j in range(BLOCK_CHARS // 64)]
            text = self._texts[hash_id] = "".join(parts)
        return text


def ideal_hit_rate(rows: list[Row]) -> float:
    """Prefix-cache hit rate (tokens) of one infinite cache that saw every request: the
    sharing the trace allows, whatever the routing."""
    seen: set[tuple[int, ...]] = set()
    hit = total = 0
    for r in rows:
        n = 0
        while n < len(r.hash_ids) and r.hash_ids[:n + 1] in seen:
            n += 1
        hit += min(n * BLOCK_TOKENS, r.input_tokens - 1)
        total += r.input_tokens
        seen.update(r.hash_ids[:i + 1] for i in range(len(r.hash_ids)))
    return hit / max(total, 1)
