"""The emulated engine's prefix cache: which KV blocks hold which prompt prefix, after vLLM's
automatic prefix caching (``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``; design
notes: docs.vllm.ai, "Automatic Prefix Caching").

- A full block of prompt tokens is *cached* under its chained hash (``blocks.py``) once
  its tokens are computed; a later request whose leading hashes are cached reuses those
  blocks (they count as computed, so its prefill pays only for the rest). At least one
  prompt token is always computed (the last block is recomputed when the whole prompt is
  cached), as vLLM does to produce the first token's logits.
- Blocks are reference-counted by the running sequences that hold them. A block no
  sequence holds stays cached but *free*: it counts as free KV (``kv_cache_usage_perc``
  leaves it out, as vLLM's does) and is evicted, least recently freed first, when a
  sequence needs a block and no empty one is left. A sequence frees its blocks tail first,
  so a prefix's last blocks go before its first (vLLM's ``free_blocks`` order).
- Two sequences that compute the same block at once each hold a private copy; only the
  first is cached (vLLM keeps one block per hash).
- Every change is also a KV-cache event (vLLM's ``BlockStored`` / ``BlockRemoved``;
  ``emulator/kv_events.py`` publishes them), and the tokens queried and hit are counted for
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``.

Pure bookkeeping: the scheduler (``emulator/scheduler.py``) owns the block counts.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from llmroute.kvevents import BlockRemoved, BlockStored, KvEvent


@dataclass(frozen=True, slots=True)
class Match:
    """A lookup: ``blocks`` leading blocks cached, ``revived`` of them free now (taking
    them moves them back into use)."""

    blocks: int
    revived: int


class PrefixCache:
    """Cached blocks by chained hash (module docstring); ``block_size`` tokens a block."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self._refs: dict[int, int] = {}  # held blocks: hash -> sequences holding it
        self._free: OrderedDict[int, None] = OrderedDict()  # cached, unheld; LRU first
        self.events: list[KvEvent] = []
        self.queries = 0
        self.hits = 0

    @property
    def free_cached(self) -> int:
        """Blocks that are free but still hold a cached prefix (evictable)."""
        return len(self._free)

    def cached(self, key: int) -> bool:
        """True when a block with this hash is cached (held or free)."""
        return key in self._refs or key in self._free

    def match(self, hashes: tuple[int, ...], prompt_tokens: int) -> Match:
        """The longest cached run of leading ``hashes``, leaving at least one token of the
        ``prompt_tokens`` to compute; nothing changes."""
        limit = min(len(hashes), (prompt_tokens - 1) // self.block_size)
        blocks = revived = 0
        while blocks < limit and self.cached(hashes[blocks]):
            revived += hashes[blocks] in self._free
            blocks += 1
        return Match(blocks, revived)

    def acquire(self, hashes: tuple[int, ...], prompt_tokens: int) -> list[int]:
        """Hold the cached leading blocks of a new sequence (``match``) and count the query
        (``prompt_tokens``) and its hit; returns the hashes now held, in order."""
        found = self.match(hashes, prompt_tokens)
        held = list(hashes[:found.blocks])
        for key in held:
            if key in self._free:
                del self._free[key]
                self._refs[key] = 1
            else:
                self._refs[key] += 1
        self.queries += prompt_tokens
        self.hits += found.blocks * self.block_size
        return held

    def store(self, hashes: tuple[int, ...], start: int, end: int, held: list[int]) -> None:
        """Blocks ``start … end−1`` of a sequence's ``hashes`` were just computed: cache each
        one not cached yet (held by that sequence: appended to ``held``), one
        ``BlockStored`` event for the run (its parent: block ``start − 1``)."""
        stored = []
        for key in hashes[start:end]:
            if self.cached(key):
                continue  # another sequence cached it first: this copy stays private
            self._refs[key] = 1
            held.append(key)
            stored.append(key)
        if stored:
            parent = hashes[start - 1] if start > 0 else None
            self.events.append(BlockStored(stored, parent, [], self.block_size, None, "GPU"))

    def release(self, held: list[int]) -> int:
        """A sequence lets go of ``held`` (tail first); returns how many blocks no sequence
        holds any more (they stay cached, free)."""
        unheld = 0
        for key in reversed(held):
            refs = self._refs[key] - 1
            if refs:
                self._refs[key] = refs
                continue
            del self._refs[key]
            self._free[key] = None
            unheld += 1
        held.clear()
        return unheld

    def evict(self, n: int) -> None:
        """Drop the ``n`` least recently freed cached blocks (one ``BlockRemoved`` event).
        Raises KeyError when fewer are free."""
        removed = [self._free.popitem(last=False)[0] for _ in range(n)]
        if removed:
            self.events.append(BlockRemoved(removed, "GPU"))

    def take_events(self) -> list[KvEvent]:
        """The events since the last call, oldest first."""
        out, self.events = self.events, []
        return out
