"""The ``cache:`` section of the configuration (the answer cache, docs/cache.md).

Off by default: a cache that serves an answer made for another request is worse than
none, and whether repeated questions deserve the same answer is the operator's call
(docs/cache.md "Why off by default").
"""

from __future__ import annotations

from pydantic import Field

from llmroute.config.base import Strict


class CacheConfig(Strict):
    """The answer cache: ``enabled``; the semantic tier (``semantic``) serves the nearest
    stored request of the same context at cosine similarity ≥ ``threshold`` (0–1; per
    intent: ``threshold_by_intent``), when the guards and the order verifier
    (``verify``: at most ``max_moved`` shared words out of place, or one block of at
    least ``min_block`` words moved as a whole — 0: none —, and ``max_changed``, a
    fraction 0–1, of words in one prompt only; ``cache/verify.py``) pass; ``candidates`` nearest entries are
    tried, most similar first. A request whose ``temperature`` is above
    ``max_temperature`` asks for variety: it is neither served nor stored. Entries live
    ``ttl_s`` seconds (per intent: ``ttl_by_intent``), at most ``max_entries`` of them and
    ``max_bytes`` in all (least recently used evicted first), each at most
    ``max_entry_bytes``; ``per_key``: entries are also kept per API key (always per
    tenant). With ``state: {kind: redis}`` and ``share``, the replicas exchange new entries
    and purges every ``share_interval_s`` seconds through a Redis stream of about
    ``share_keep`` entries (``state/answers.py``)."""

    enabled: bool = False
    semantic: bool = True
    threshold: float = Field(0.9, ge=0, le=1)
    threshold_by_intent: dict[str, float] = {}
    verify: bool = True
    max_moved: int = Field(0, ge=0)
    min_block: int = Field(2, ge=0)
    max_changed: float = Field(0.12, ge=0, le=1)
    candidates: int = Field(4, ge=1, le=64)
    max_temperature: float = Field(1.0, ge=0)
    ttl_s: float = Field(3600.0, gt=0)
    ttl_by_intent: dict[str, float] = {}
    max_entries: int = Field(10_000, ge=1)
    max_bytes: int = Field(64 * 2**20, ge=1024)
    max_entry_bytes: int = Field(256 * 2**10, ge=256)
    per_key: bool = False
    share: bool = True
    share_interval_s: float = Field(0.1, gt=0, le=10)
    share_keep: int = Field(10_000, ge=10)

    def threshold_for(self, intent: str) -> float:
        """The similarity a semantic hit needs for a request of ``intent``."""
        return self.threshold_by_intent.get(intent, self.threshold)

    def ttl_for(self, intent: str) -> float:
        """Seconds an answer to a request of ``intent`` is kept."""
        return self.ttl_by_intent.get(intent, self.ttl_s)
