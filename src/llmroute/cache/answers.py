"""The answer cache: look a request up (exact, then semantic behind the guards), store an
answer, purge; and what the replicas exchange (docs/cache.md).

``lookup`` decides, in this order (the first that applies gives the result and reason):

1. ``bypass`` — not a chat or completions request (``endpoint``); ``Cache-Control:
   no-store`` (neither served nor stored) or ``no-cache`` (not served; the fresh answer is
   stored); ``n`` > 1 (``n``); ``temperature`` above ``cache.max_temperature``
   (``temperature``: the client asks for variety); a time-sensitive prompt
   (``time_sensitive``: ``gate/timely.py`` — "today", "latest", live prices, 今天, 最新 …).
2. ``hit-exact`` — an entry of the same exact key (``cache/keys.py``): the same request.
3. ``miss`` without a semantic tier: ``not_found``.
4. the semantic tier, over the entries of the same context key (same scope, model, system
   prompt, earlier turns, tools, sampling) — ``miss`` when tools are defined or were called
   (``tools``), when there is no vector (``no_vector``: the gate has no encoder), when no
   entry is at least ``threshold_for(intent)`` similar (``not_found``); else the
   ``candidates`` nearest are tried, most similar first, and each refused when the gate's
   intent differs (``intent``: the stored prompt's label is neither the asked prompt's
   nor a runner-up the gate gives at least ``CLOSE_INTENT``), when the prompts' numbers, entities, code identifiers or
   quoted strings differ (``numbers`` … ``quotes``: ``cache/anchors.py``; with the
   verifier on, numbers as multisets and names by presence, the order left to it), when
   one negates or takes the other side of an opposite pair (``polarity``:
   ``cache/polarity.py``: safe/unsafe, not, left/right, 不, 南/北 …), or when
   the order verifier refuses (``order``: shared words moved otherwise than as one block;
   ``wording``: too many words differ; ``cache/verify.py``). The first that passes is a ``hit-semantic``; when
   none does, the miss's reason is the nearest one's refusal.

A miss (and a ``no-cache`` bypass) may store the answer (``store``): a JSON answer at once,
a stream when it ends cleanly (``cache/collect.py``). Entries and purges are also queued
for the other replicas (``take_events``; ``state/answers.py`` sends them) and theirs are
applied (``apply_event``); an event that does not decode is dropped and counted, never
served. Only the router makes entries: nothing a client sends is written as one.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

import numpy as np
import orjson
from prometheus_client import CollectorRegistry

from llmroute.cache.anchors import Anchors, differs
from llmroute.cache.collect import unstorable
from llmroute.cache.entry import BadEntry, Entry, decode, encode
from llmroute.cache.keys import Keys, keys
from llmroute.cache.metrics import CacheMetrics
from llmroute.cache.polarity import flipped
from llmroute.cache.store import Entries
from llmroute.cache.verify import compare, words
from llmroute.config.cache import CacheConfig
from llmroute.gate.timely import TimelyDetector
from llmroute.types import ChatRequest, Intent

Embed = Callable[[ChatRequest], Awaitable[Any]]
"""The gate's ``embed``: the latest turn's vector, or None."""

ZERO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
"""A hit's usage: no engine token was used (the meter, quotas and cost see zero)."""

CLOSE_INTENT = 0.25
"""A runner-up at least this probable counts as the prompt's intent too (the gate calls a
prompt both intents from this probability on: ``verdict.make_intent``'s composite rule)."""

OUTBOX = 4096
"""Events kept for the other replicas while the exchange cannot send them."""


class Scope(NamedTuple):
    """Whose an entry is: ``tenant`` (``""`` with auth off), ``key_id`` (``""`` unless
    ``cache.per_key``; the key's id is kept on the entry for purges either way as
    ``owner_key``), and ``route``: the strategy and pool the request was planned on."""

    tenant: str
    key_id: str
    route: str
    owner_key: str = ""


class Lookup(NamedTuple):
    """One lookup's outcome: ``result`` (``hit-exact``, ``hit-semantic``, ``miss``,
    ``bypass``), ``reason``, the ``entry`` served (hits), its ``similarity`` (cosine;
    1.0 for an exact hit), the request's ``keys`` and ``vector`` (for storing), and
    whether the answer may be stored (``store``)."""

    result: str
    reason: str
    entry: Entry | None = None
    similarity: float = 0.0
    keys: Keys | None = None
    vector: Any = None
    store: bool = False


def cache_control(headers: Mapping[str, str]) -> frozenset[str]:
    """The request's ``Cache-Control`` directives, lower case (RFC 9111 §5.2.1)."""
    value = headers.get("cache-control", "")
    return frozenset(d.strip().split("=", 1)[0].lower() for d in value.split(",") if d.strip())


class AnswerCache:
    """The cache (module docstring) under ``cfg``; ``embed`` is the gate's, ``clock``
    gives epoch seconds (entries lapse on the fleet's wall clock); metrics on
    ``registry``."""

    def __init__(self, cfg: CacheConfig, embed: Embed, clock: Callable[[], float],
                 registry: CollectorRegistry | None = None):
        self.cfg, self._embed, self._clock = cfg, embed, clock
        self.entries = Entries(cfg.max_entries, cfg.max_bytes, clock)
        self.metrics = CacheMetrics(registry or CollectorRegistry(),
                                    lambda: (len(self.entries), self.entries.bytes))
        self._timely = TimelyDetector()
        self._outbox: deque[tuple[str, bytes]] = deque(maxlen=OUTBOX)
        self.sharing = False
        self.dim: int | None = None

    def now(self) -> float:
        """The cache's clock: epoch seconds."""
        return self._clock()

    async def lookup(self, request: ChatRequest, intent: Intent, scope: Scope,
                     headers: Mapping[str, str]) -> Lookup:
        """The request's ``Lookup`` (module docstring), counted in the metrics."""
        found = await self._lookup(request, intent, scope, headers)
        self.metrics.requests.labels(found.result, found.reason).inc()
        return found

    async def _lookup(self, request: ChatRequest, intent: Intent, scope: Scope,
                      headers: Mapping[str, str]) -> Lookup:
        bypass = self._bypass(request, headers)
        if bypass is not None:
            return bypass
        k = keys(request, (scope.tenant, scope.key_id, scope.route))
        entry = self.entries.exact(k.exact)
        if entry is not None:
            return Lookup("hit-exact", "exact", entry, 1.0, k)
        if not self.cfg.semantic or not k.query:
            return Lookup("miss", "not_found", keys=k, store=True)
        if _tools(request):
            return Lookup("miss", "tools", keys=k, store=True)
        vector = intent.embedding
        if vector is None:
            self.metrics.embeds.inc()
            vector = await self._embed(request)
        if vector is None:
            return Lookup("miss", "no_vector", keys=k, store=True)
        return self._semantic(k, vector, intent)

    def _bypass(self, request: ChatRequest, headers: Mapping[str, str]) -> Lookup | None:
        if request.endpoint == "embeddings":
            return Lookup("bypass", "endpoint")
        control = cache_control(headers)
        if "no-store" in control:
            return Lookup("bypass", "no-store")
        body = request.body
        n = body.get("n")
        if isinstance(n, int) and n > 1:
            return Lookup("bypass", "n")
        temperature = body.get("temperature")
        if isinstance(temperature, int | float) and temperature > self.cfg.max_temperature:
            return Lookup("bypass", "temperature")
        if self._timely(request.text):
            return Lookup("bypass", "time_sensitive")
        if "no-cache" in control:
            return Lookup("bypass", "no-cache", keys=None, store=True)
        return None

    def _semantic(self, k: Keys, vector: np.ndarray, intent: Intent) -> Lookup:
        """The semantic tier's verdict for ``k`` at ``vector`` (module docstring)."""
        floor = self.cfg.threshold_for(intent.label)
        near = self.entries.nearest(k.context, vector, self.cfg.candidates, floor)
        if not near:
            return Lookup("miss", "not_found", keys=k, vector=vector, store=True)
        asked = Anchors.of(k.query)
        asked_words = words(k.query) if self.cfg.verify else []
        labels = intents_of(intent)
        first = None
        for entry, similarity in near:
            refusal = self.refusal(entry, labels, k.query, asked, asked_words)
            if refusal is None:
                self.entries.touch(entry)
                return Lookup("hit-semantic", "semantic", entry, similarity, k, vector)
            first = first or refusal
        return Lookup("miss", first or "not_found", keys=k, vector=vector, store=True)

    def refusal(self, entry: Entry, labels: frozenset[str], query: str, asked: Anchors,
                asked_words: list[str]) -> str | None:
        """Why ``entry`` may not answer the prompt ``query`` of intents ``labels``
        (``intents_of``) with these anchors and words, or None (module docstring, step 4)."""
        if entry.intent not in labels:
            return "intent"
        cfg = self.cfg
        kind = differs(entry.anchors, asked, (entry.query, query) if cfg.verify else None)
        if kind is not None:
            return kind
        if flipped(entry.query, query):
            return "polarity"
        if not cfg.verify:
            return None
        verdict = compare(words(entry.query), asked_words)
        if not verdict.in_order(cfg.max_moved, cfg.min_block):
            return "order"
        return "wording" if verdict.changed > cfg.max_changed else None

    def store(self, found: Lookup, request: ChatRequest, intent: Intent, scope: Scope,
              answer: dict[str, Any]) -> Entry | None:
        """Keep ``answer`` for ``request`` when ``found`` allows it and it is storable
        (``collect.unstorable``) and small enough; the entry, or None."""
        if not found.store or unstorable(answer) is not None:
            return None
        k = found.keys or keys(request, (scope.tenant, scope.key_id, scope.route))
        now = self._clock()
        vector = found.vector if found.vector is None else np.asarray(found.vector, np.float32)
        entry = Entry(secrets.token_hex(8), scope.tenant, scope.owner_key, k.exact, k.context,
                      k.query, Anchors.of(k.query), intent.label, _stored(answer),
                      request.request_id, now, now + self.cfg.ttl_for(intent.label), vector)
        data = encode(entry)
        if len(data) > self.cfg.max_entry_bytes:
            return None
        entry.size = len(data)
        self._keep(entry, "local")
        if self.sharing:
            self._outbox.append(("put", data))
        return entry

    def purge(self, tenant: str | None = None, key_id: str | None = None) -> int:
        """Remove the entries of ``tenant`` / ``key_id`` (None: all) here, and queue the
        purge for the other replicas; the number removed here."""
        removed = self.entries.purge(tenant, key_id)
        self.metrics.dropped.labels("purged").inc(removed)
        if self.sharing:
            self._outbox.append(("purge", orjson.dumps({"tenant": tenant, "key_id": key_id})))
        return removed

    def take_events(self) -> list[tuple[str, bytes]]:
        """The entries and purges queued for the other replicas (drained)."""
        out = list(self._outbox)
        self._outbox.clear()
        return out

    def apply_event(self, kind: str, data: bytes) -> None:
        """Apply another replica's event (``put`` or ``purge``); one that does not decode is
        dropped and counted (``bad_entry``)."""
        try:
            if kind == "put":
                entry = decode(data, self.dim, self.cfg.max_entry_bytes)
                if entry.expires <= self._clock():
                    self.metrics.dropped.labels("expired").inc()
                    return
                self._keep(entry, "fleet")
            elif kind == "purge":
                what = orjson.loads(data)
                removed = self.entries.purge(_text_or_none(what, "tenant"),
                                             _text_or_none(what, "key_id"))
                self.metrics.dropped.labels("purged").inc(removed)
            else:
                raise BadEntry(f"unknown event {kind!r}")
        except (BadEntry, orjson.JSONDecodeError, TypeError):
            self.metrics.dropped.labels("bad_entry").inc()

    def _keep(self, entry: Entry, source: str) -> None:
        if entry.vector is not None and self.dim is None:
            self.dim = int(entry.vector.shape[0])
        evicted = self.entries.put(entry)
        self.metrics.stored.labels(source).inc()
        if evicted:
            self.metrics.dropped.labels("evicted").inc(evicted)


def intents_of(intent: Intent) -> frozenset[str]:
    """The verdict's label and its runners-up at least ``CLOSE_INTENT`` probable."""
    return frozenset((intent.label, *(label for label, p in intent.runners_up
                                      if p >= CLOSE_INTENT)))


def served(entry: Entry, request: ChatRequest, created: int) -> dict[str, Any]:
    """``entry``'s answer as the answer to ``request``: its own id and time, zero usage."""
    return {**entry.answer, "id": f"chatcmpl-{request.request_id}", "created": created,
            "usage": dict(ZERO_USAGE)}


def _stored(answer: dict[str, Any]) -> dict[str, Any]:
    """What an entry keeps of an answer: object, model, choices (no logprobs), usage."""
    return {"object": answer.get("object", "chat.completion"), "model": answer.get("model"),
            "choices": [{k: v for k, v in c.items() if k != "logprobs"}
                        for c in answer["choices"]]}


def _tools(request: ChatRequest) -> bool:
    """Tools defined, or called earlier in the conversation."""
    if request.has_tools:
        return True
    messages = request.body.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, dict) and (m.get("role") == "tool" or m.get("tool_calls"))
        for m in messages)


def _text_or_none(what: Any, name: str) -> str | None:
    value = what.get(name) if isinstance(what, dict) else None
    if value is not None and not isinstance(value, str):
        raise TypeError(f"purge: {name} is not text")
    return value
