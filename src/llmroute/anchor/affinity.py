"""The router-side prefix index: which backend holds which prompt prefix, learned from the
routing decisions themselves (GIE's approximate prefix scorer, ``gateway-api-inference-
extension: pkg/epp/scheduling/framework/plugins/multi/prefix/plugin.go``; SGLang's
cache-aware router keeps the same per worker as a radix tree, ``sgl-router/src/policies/
cache_aware.rs``).

Keys are the chained hashes of the prompt's leading blocks of ``block_tokens`` tokens
(``blocks.py``: tokenizer-free, 3 characters a token), at most ``max_blocks`` of them; a
key names its whole prefix, so backends holding key ``i`` hold blocks ``0…i``. The block is
a multiple of the engines' own (vLLM's 16 tokens; 256 = 16 × 16 by default), so a matched
key stands for engine blocks the engine really keys the same way. Block sizes are aligned
to characters, not to an engine's tokenizer: against the emulator (which caches exactly
these character blocks) a match is exact; against a real engine it estimates
(``docs/prefix.md`` measures it against the Mooncake trace's true sharing).

Per backend the keys it was sent are kept in least-recently-used order, at most its
capacity: the engine's KV cache in blocks of ``block_tokens`` when it reports one
(``vllm:cache_config_info``), else ``capacity``. Recording touches a prompt's keys deepest
first, so the LRU order drops a prefix's tail before its head, as vLLM evicts
(``free_blocks`` frees a request's blocks in reverse). Memory is bounded: at most
``capacity`` keys per backend (each key: one dict entry per holder and one per backend
LRU), whatever the traffic.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from llmroute.blocks import block_hashes

BLOCK_TOKENS = 256
"""Tokens a key covers by default: 16 of vLLM's 16-token blocks."""
MAX_BLOCKS = 512
"""Keys per prompt by default (131k tokens of prefix at 256 tokens a key)."""
CAPACITY = 16384
"""Keys per backend by default, and the most ever kept (4M tokens at 256 a key; GIE's
``lruCapacityPerServer`` is 31,250 of its 64-character blocks)."""


class PrefixIndex:
    """Keys (``keys``) → the backends that were sent them, one LRU per backend (module
    docstring). ``block_tokens`` ≥ 1, ``max_blocks`` ≥ 1, ``capacity`` ≥ 1 (keys per
    backend)."""

    def __init__(self, block_tokens: int = BLOCK_TOKENS, max_blocks: int = MAX_BLOCKS,
                 capacity: int = CAPACITY):
        if min(block_tokens, max_blocks, capacity) < 1:
            raise ValueError("block_tokens, max_blocks and capacity must be ≥ 1")
        self.block_tokens = block_tokens
        self.max_blocks = max_blocks
        self.capacity = capacity
        self._holders: dict[int, set[str]] = {}
        self._lru: dict[str, OrderedDict[int, None]] = {}
        self._limits: dict[str, int] = {}

    def keys(self, text: str) -> list[int]:
        """The keys of ``text``'s full leading blocks, at most ``max_blocks``."""
        return block_hashes(text, self.block_tokens, self.max_blocks)

    def record(self, keys: Sequence[int], backend_id: str) -> None:
        """``backend_id`` was sent a prompt with these ``keys``: it holds them now (most
        recently used; the deepest first, so the head is the last to go)."""
        lru = self._lru.get(backend_id)
        if lru is None:
            lru = self._lru[backend_id] = OrderedDict()
        holders = self._holders
        for key in reversed(keys):
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
                holders.setdefault(key, set()).add(backend_id)
        self._trim(backend_id, lru)

    def matched(self, keys: Sequence[int]) -> dict[str, int]:
        """``{backend_id: leading keys it holds}`` for every backend holding at least the
        first of ``keys`` (a backend's run ends at the first key it does not hold)."""
        if not keys:
            return {}
        first = self._holders.get(keys[0])
        if not first:
            return {}
        depth = dict.fromkeys(first, 1)
        alive = set(first)
        for i in range(1, len(keys)):
            holders = self._holders.get(keys[i])
            if not holders:
                break
            alive &= holders
            if not alive:
                break
            for b in alive:
                depth[b] = i + 1
        return depth

    def set_capacity(self, backend_id: str, keys: int) -> None:
        """Hold at most ``keys`` keys (≥ 1, at most ``capacity``) for ``backend_id``: its
        engine's cache size in keys."""
        limit = max(1, min(keys, self.capacity))
        if self._limits.get(backend_id) != limit:
            self._limits[backend_id] = limit
            lru = self._lru.get(backend_id)
            if lru is not None:
                self._trim(backend_id, lru)

    def forget(self, backend_id: str) -> None:
        """Drop everything ``backend_id`` was said to hold (its cache was emptied)."""
        for key in self._lru.pop(backend_id, ()):
            self._drop(key, backend_id)

    def size(self, backend_id: str) -> int:
        """Keys held for ``backend_id``."""
        return len(self._lru.get(backend_id, ()))

    def backends(self) -> Iterable[str]:
        """The backends with any key."""
        return list(self._lru)

    def _trim(self, backend_id: str, lru: OrderedDict[int, None]) -> None:
        limit = self._limits.get(backend_id, self.capacity)
        while len(lru) > limit:
            key, _ = lru.popitem(last=False)
            self._drop(key, backend_id)

    def _drop(self, key: int, backend_id: str) -> None:
        holders = self._holders.get(key)
        if holders is not None:
            holders.discard(backend_id)
            if not holders:
                del self._holders[key]
