"""KV-cache block hashes of a prompt, without a tokenizer (the emulator and the anchor share
them, as they share ``text.py``'s token estimate).

An engine with prefix caching (vLLM's automatic prefix caching, ``vllm/v1/core/
kv_cache_utils.py``: ``hash_block_tokens``) keys each *full* block of ``block_size`` prompt
tokens by a hash of the block's tokens chained with its parent block's hash, so equal keys
mean equal prefixes and a request reuses the longest run of leading keys already cached.
We have no tokenizer, so a token is ``CHARS_PER_TOKEN`` characters of the prompt text — the
rate ``text.estimate_tokens`` counts for ASCII text — and block ``i`` of ``block_tokens``
tokens is the characters ``[i·w, (i+1)·w)`` with ``w = block_tokens × CHARS_PER_TOKEN``.
The emulator caches exactly these blocks; the anchor computes the same keys (at the
engine's block size for the KV-event index, at a multiple of it for its own index), so a
key match is a match of the blocks the engine caches. For a real engine the tokenizer
differs: there a character block stands for about ``w / 4`` tokens of English text, and
the anchor's matches are estimates (``docs/prefix.md``).

The chain: ``key₀ = H(block₀)``, ``keyᵢ = H(keyᵢ₋₁ ‖ blockᵢ)``, H = BLAKE2b with an 8-byte
digest read as an unsigned 64-bit integer (vLLM's ``ExternalBlockHash`` is an int on the
wire). The text of a chat prompt is its message contents joined by newlines, as the
router's ``ChatRequest.text`` and the emulator read it.
"""

from __future__ import annotations

import hashlib

CHARS_PER_TOKEN = 3
"""Characters of prompt text per token (``text.estimate_tokens``' rate for ASCII)."""


def block_hashes(text: str, block_tokens: int, max_blocks: int | None = None) -> list[int]:
    """The chained keys (unsigned 64-bit ints) of the full ``block_tokens``-token blocks at
    the start of ``text``, at most ``max_blocks`` of them (None: all). Raises ValueError for
    ``block_tokens`` < 1."""
    if block_tokens < 1:
        raise ValueError("block_tokens must be ≥ 1")
    width = block_tokens * CHARS_PER_TOKEN
    n = len(text) // width
    if max_blocks is not None:
        n = min(n, max_blocks)
    keys: list[int] = []
    prev = b""
    blake = hashlib.blake2b
    for i in range(n):
        prev = blake(prev + text[i * width:(i + 1) * width].encode(), digest_size=8).digest()
        keys.append(int.from_bytes(prev, "big"))
    return keys
