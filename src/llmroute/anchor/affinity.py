"""Prefix affinity: which backend recently served a prompt that starts the same way.

Engines with prefix caching (vLLM APC, SGLang RadixAttention, llama.cpp slot reuse) answer
faster when the leading tokens of a prompt are already in their KV cache. The index hashes
the prompt's leading blocks of ``block_chars`` characters (≈ 64 tokens at ~4 chars/token)
as a chain — key i covers blocks 0..i, so equal keys mean equal prefixes — and remembers,
per key, the backend that last served it and when. Entries older than ``ttl_s`` seconds are
ignored (the engine has likely evicted them); at most ``capacity`` keys are kept (LRU).

State lives here, at the I/O edge: dispatch records the backend that served; the
``prefix-affinity`` scorer only reads.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict


class PrefixIndex:
    """Chained block hashes of served prompts → ``(backend_id, served_at)``."""

    def __init__(self, block_chars: int = 256, max_blocks: int = 8, ttl_s: float = 120.0,
                 capacity: int = 8192):
        self.block_chars = block_chars
        self.max_blocks = max_blocks
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._served: OrderedDict[bytes, tuple[str, float]] = OrderedDict()

    def keys(self, text: str) -> list[bytes]:
        """One 8-byte key per full leading block of ``text`` (at most ``max_blocks``)."""
        keys: list[bytes] = []
        digest = b""
        for i in range(min(len(text) // self.block_chars, self.max_blocks)):
            block = text[i * self.block_chars:(i + 1) * self.block_chars].encode()
            digest = hashlib.blake2b(digest + block, digest_size=8).digest()
            keys.append(digest)
        return keys

    def record(self, text: str, backend_id: str, now: float) -> None:
        """``backend_id`` served a prompt ``text`` at ``now`` (s)."""
        for key in self.keys(text):
            self._served[key] = (backend_id, now)
            self._served.move_to_end(key)
        while len(self._served) > self.capacity:
            self._served.popitem(last=False)

    def matched_blocks(self, keys: list[bytes], now: float) -> dict[str, int]:
        """``{backend_id: leading blocks it served last}`` among ``keys`` (from ``keys``)."""
        depth: dict[str, int] = {}
        for i, key in enumerate(keys):
            hit = self._served.get(key)
            if hit is not None and now - hit[1] <= self.ttl_s:
                depth[hit[0]] = i + 1
        return depth
