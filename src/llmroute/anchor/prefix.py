"""``Affinity``: how many of a request's prompt tokens each backend is expected to have in
its prefix cache — what the ``prefix-affinity`` scorer rewards and what the expected-TTFT
model (``scorers/expected_ttft.py``, the ``ttft-headroom`` filter) leaves out of the
prefill it prices, so a cache hit never outweighs a queue that costs more than the prefill
it saves.

Two indexes answer it:

- the router-side ``PrefixIndex`` (``anchor/affinity.py``): what this router sent where,
  learned from its own routing decisions (``dispatched``), per backend capped at the engine's
  cache size. Its estimate ``leading keys × block_tokens`` is scaled by the backend's
  *trust*: how much of what the index predicted the engine really found cached, read from
  the engine's own counters (``vllm:prefix_cache_hits_total`` over the tokens the index
  predicted for the requests sent there since the counter last moved; an EWMA, 1.0 until
  measured). An engine without prefix caching (or evicting faster than the index thinks)
  drives its trust, and with it the affinity, towards 0.
- the precise ``KvEventIndex`` (``anchor/kv_index.py``), where the backend publishes
  vLLM's KV-cache events: its own blocks, matched at its own block size; used instead of
  the router's guess while its stream is live and its signals fresh — or with the guess,
  when that is larger: a block is stored only once its prefill ran, so the events cannot
  show the prefix of a request still queued there, which the router's own records do
  (the next turn of a conversation follows its previous one before that one is served).

Faults: an engine whose prefix-cache query counter goes backwards restarted (its cache is
empty): both indexes forget it at the next decision that sees the poll — a stale claim
outlives the cache by one poll at most. A dark backend's events are not trusted (the
router-side guess, scaled by trust, stands in).

Per decision the keys are hashed once per request (kept for its dispatch, for the last
``MEMO`` requests) and the column of expected cached tokens is computed once
(``memo_column``), shared by the scorer, the filter and ``expected-ttft``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.kv_index import KvEventIndex
from llmroute.anchor.protocol import AnchorContext
from llmroute.anchor.scorers.base import engine_rows, memo_column
from llmroute.blocks import block_hashes
from llmroute.types import Backend, ChatRequest, EngineSignals

MEMO = 256
"""Requests whose keys are kept between the decision and the dispatch."""
TRUST_ALPHA = 0.3
"""Weight of the newest hits/predicted ratio in a backend's trust."""
CACHED = "cached-tokens"
"""The ``ctx.columns`` memo key of ``cached_tokens``."""


@dataclass
class _Trust:
    """One backend's calibration: engine counters last seen, tokens predicted since."""

    trust: float = 1.0
    queries: int | None = None
    hits: int = 0
    predicted: float = 0.0


class Affinity:
    """Expected cached prompt tokens per backend (module docstring). ``pricing`` turns its
    use in decisions on (the profile has a ``prefix-affinity`` scorer); ``events`` is the
    precise index, None when no backend publishes KV events."""

    def __init__(self, index: PrefixIndex | None = None, events: KvEventIndex | None = None):
        self.index = index or PrefixIndex()
        self.events = events
        self.pricing = False
        self._keys: OrderedDict[tuple[str, int], tuple[int, ...]] = OrderedDict()
        self._fine: OrderedDict[tuple[str, int, int], tuple[int, ...]] = OrderedDict()
        self._trust: dict[str, _Trust] = {}
        self._outbox: list[tuple[str, tuple[int, ...]]] | None = None
        self._seen: dict[str, EngineSignals] = {}  # the poll observe last read, per backend

    def keys(self, request: ChatRequest) -> tuple[int, ...]:
        """The router-side keys of ``request``'s prompt (hashed once per request: kept by
        request id and the text's hash, which a str computes once)."""
        memo = (request.request_id, hash(request.text))
        keys = self._keys.get(memo)
        if keys is None:
            keys = tuple(self.index.keys(request.text))
            self._keys[memo] = keys
            if len(self._keys) > MEMO:
                self._keys.popitem(last=False)
        return keys

    def cached_tokens(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """Expected cached prompt tokens of ``ctx.request`` on each candidate, in order
        (0.0 with nothing cached; at most the prompt less one token). Computed once per
        decision; callers must not mutate it."""
        return memo_column(ctx, CACHED, candidates, self._column)

    def holders(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[str]:
        """Ids of the backends expected to hold some of ``ctx.request``'s prompt (cached
        tokens > 0), the longest first (equal depths in no fixed order). Without live KV events
        only the backends the router-side index matches are looked at — a few, not the pool,
        so the sample filter's price stays flat in the pool's size — and an id may name a
        backend outside ``candidates``; with them, every candidate's column
        (``cached_tokens``)."""
        if self.events is not None:
            cached = self.cached_tokens(ctx, candidates)
            held = [(c, b.id) for b, c in zip(candidates, cached) if c > 0]
        else:
            held = self._matched(ctx)
        held.sort(key=itemgetter(0), reverse=True)
        return [bid for _, bid in held]

    def _matched(self, ctx: AnchorContext) -> list[tuple[float, str]]:
        """``(expected cached tokens, backend id)`` of every backend the router-side
        index matches for ``ctx.request`` (tokens > 0), each one's poll read first."""
        request = ctx.request
        keys = self.keys(request)
        depth = self.index.matched(keys) if keys else {}
        if not depth:
            return []
        engines = ctx.snapshot.engines
        for backend_id in list(depth):  # only a matched backend's poll can change its part
            self._read_poll(backend_id, engines.get(backend_id))
        depth = self.index.matched(keys)
        held = [(self._expected(request, bid, depth), bid) for bid in depth]
        return [h for h in held if h[0] > 0]

    def dispatched(self, request: ChatRequest, backend_id: str, tokens: int) -> int:
        """``request`` is sent to ``backend_id``: it will hold the prompt's blocks (recorded
        now, as GIE records its pick before the request goes out, so a conversation's next
        turn follows it even while this one waits in the engine's queue). Returns the
        prefill it is sent: ``tokens`` (≥ 1) less what the backend is expected to have
        cached, when pricing is on (else ``tokens``). The tokens the index expected count
        towards the backend's trust."""
        keys = self.keys(request)
        depth = self.index.matched(keys)  # once, for the price and the trust both
        expected = self._expected(request, backend_id, depth) if self.pricing else 0.0
        if keys:
            trust = self._trust.setdefault(backend_id, _Trust())
            trust.predicted += depth.get(backend_id, 0) * self.index.block_tokens
            self.index.record(keys, backend_id)
            if self._outbox is not None and len(self._outbox) < MEMO * 16:
                self._outbox.append((backend_id, keys))
        return max(tokens - int(expected), 1)

    def share(self) -> None:
        """Keep this router's records for ``take_records`` (a fleet shares them:
        ``state/prefix.py``)."""
        if self._outbox is None:
            self._outbox = []

    def take_records(self) -> list[tuple[str, tuple[int, ...]]]:
        """``(backend_id, keys)`` of the requests sent since the last call (with ``share``
        on; at most ``16 × MEMO`` are kept between calls)."""
        if self._outbox is None:
            return []
        out, self._outbox = self._outbox, []
        return out

    def learn(self, backend_id: str, keys: Sequence[int]) -> None:
        """Another router sent a prompt with these ``keys`` to ``backend_id``."""
        self.index.record(keys, backend_id)

    def trust(self, backend_id: str) -> float:
        """How much of the router-side estimate ``backend_id``'s engine confirms (0–1)."""
        t = self._trust.get(backend_id)
        return t.trust if t is not None else 1.0

    def observe(self, backend_id: str, signals: EngineSignals | None) -> None:
        """Read a fresh poll of ``backend_id``: its cache size bounds the index, a
        prefix-cache counter that went backwards (a restart) empties both indexes for it,
        and the hits since the last poll, over the tokens predicted, update its trust."""
        if signals is None:
            return
        if signals.kv_capacity_tokens:
            self.index.set_capacity(backend_id, signals.kv_capacity_tokens
                                    // self.index.block_tokens)
        queries, hits = signals.prefix_cache_queries_total, signals.prefix_cache_hits_total
        if queries is None or hits is None:
            return
        t = self._trust.setdefault(backend_id, _Trust())
        if t.queries is not None and queries < t.queries:
            self.forget(backend_id)
            t = self._trust[backend_id] = _Trust()
        elif t.queries is not None and queries > t.queries \
                and t.predicted >= self.index.block_tokens:
            ratio = min((hits - t.hits) / t.predicted, 1.0)
            t.trust += TRUST_ALPHA * (max(ratio, 0.0) - t.trust)
            t.predicted = 0.0
        t.queries, t.hits = queries, hits

    def forget(self, backend_id: str) -> None:
        """``backend_id``'s cache is empty (restarted): forget what both indexes hold."""
        self.index.forget(backend_id)
        if self.events is not None:
            self.events.forget(backend_id)

    def _engine_keys(self, request: ChatRequest, size: int) -> tuple[int, ...]:
        """The hashes of ``request``'s prompt at an engine's block size ``size`` (hashed
        once per request and size)."""
        memo = (request.request_id, hash(request.text), size)
        hashes = self._fine.get(memo)
        if hashes is None:
            cap = self.index.max_blocks * self.index.block_tokens // size
            hashes = self._fine[memo] = tuple(block_hashes(request.text, size, cap))
            if len(self._fine) > MEMO:
                self._fine.popitem(last=False)
        return hashes

    def _column(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[float]:
        """Expected cached tokens per candidate; a backend's signals are read (``observe``)
        when they are a new poll, and only the backends the indexes match cost a call."""
        if self.events is not None:  # every backend may hold blocks: read every new poll
            request = ctx.request
            keys = self.keys(request)
            rows = engine_rows(ctx, candidates)
            for b, e in zip(candidates, rows):
                self._read_poll(b.id, e)
            depth = self.index.matched(keys) if keys else {}  # a restart may have emptied one
            return [self._expected(request, b.id, depth, e is not None)
                    for b, e in zip(candidates, rows)]
        out = [0.0] * len(candidates)
        held = self._matched(ctx)
        if held:
            where = {b.id: i for i, b in enumerate(candidates)}
            for tokens, backend_id in held:
                i = where.get(backend_id)
                if i is not None:
                    out[i] = tokens
        return out

    def _read_poll(self, backend_id: str, signals: EngineSignals | None) -> None:
        """``observe`` a poll the first time it is seen."""
        if signals is not None and self._seen.get(backend_id) is not signals:
            self._seen[backend_id] = signals
            self.observe(backend_id, signals)

    def _expected(self, request: ChatRequest, backend_id: str,
                  depth: dict[str, int] | None, fresh: bool = True) -> float:
        """Expected cached tokens of ``request`` on ``backend_id``: the router-side depth
        (``depth``: from ``matched``, None to look it up) × block size × trust, or the
        engine's own blocks when its events are live, its signals ``fresh`` and they show
        more."""
        limit = max(request.prompt_tokens - 1, 0)
        if depth is None:
            keys = self.keys(request)
            depth = self.index.matched(keys) if keys else {}
        blocks = depth.get(backend_id, 0)
        guess = blocks * self.index.block_tokens * self.trust(backend_id) if blocks else 0.0
        events = self.events
        if events is not None and fresh and events.live(backend_id):
            size = events.block_size(backend_id)
            if size:
                held = events.matched(backend_id, self._engine_keys(request, size)) * size
                return float(min(max(held, guess), limit))
        return min(guess, limit)
