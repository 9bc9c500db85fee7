"""The answer cache as an answer stage (``flow/stages.py``; ``cache/``, docs/cache.md):
``before`` looks the ranked request up and answers a hit at once (JSON, or the answer
replayed as SSE); ``after`` stores a miss's answer as it leaves (a JSON answer now, a stream
when it ends cleanly).

Every chat or completions answer gets ``x-llmroute-cache: hit-exact | hit-semantic | miss |
bypass``; a hit also ``x-llmroute-cache-from`` (the request whose answer it serves) and no
backend headers (no engine was asked). The lookup is a ``cache`` step in the trace (so in
the log line and the audit record) and a ``cache`` entry of ``server-timing``. A hit's usage
is zero (``answers.ZERO_USAGE``): the caller's reservation is settled at zero tokens.
"""

from __future__ import annotations

import time
from typing import Any

from llmroute.cache.answers import AnswerCache, Lookup, Scope, served
from llmroute.cache.collect import Collected
from llmroute.flow.call import Call, Decision
from llmroute.flow.headers import timing_entry
from llmroute.flow.rank import rank
from llmroute.policy.auth import Caller
from llmroute.strategy.answers import replay
from llmroute.types import Routed

HEADER = "x-llmroute-cache"
FROM_HEADER = "x-llmroute-cache-from"


class CachedAnswer:
    """The answer cache's stage (module docstring). It stands after the usage meter and
    the priority slot (a hit is settled at zero tokens and frees its place, if it took one)
    and before the trial timing and the output filter (a hit is no arm's answer; what is
    stored is the screened text, as the client got it). While the fleet is saturated a
    request takes its priority place only here, once it is a miss (``placed``): a hit never
    queues behind engine-bound requests. Holds ``call.cached``: the entry scope and the
    lookup, from ``before`` to ``after``."""

    failed = None  # nothing held but the lookup

    def __init__(self, cache: AnswerCache):
        self.cache = cache

    async def before(self, call: Call) -> Routed | None:
        """Look the request up (chat and completions only); a hit is the answer. Raises
        PermissionDenied (403) for a hit the caller's key may not reach, as the miss's
        dispatch would."""
        d = call.decision
        if d is None or call.request.endpoint not in ("chat", "completions"):
            await placed(call)
            return None
        cache, caller = self.cache, call.caller
        scope = scope_of(cache, caller, d)
        t0 = time.perf_counter()
        found = await cache.lookup(call.request, d.intent, scope, call.headers)
        ms = (time.perf_counter() - t0) * 1000
        cache.metrics.lookup_seconds.observe(ms / 1000)
        entry = found.entry
        call.trace.cache(found.result, found.reason, found.similarity,
                         entry.request_id if entry is not None else None)
        call.timing.append(timing_entry("cache", ms))
        call.cached = (scope, found)
        if entry is None:
            await placed(call)
            return None
        if caller is not None and d.strategy.runner is None:
            caller.check_pool(d.plan.pool)
        if call.ticket is not None:  # no engine token was used
            await call.ticket.settle(0)
        return hit(cache, call, d, found, t0)

    async def after(self, call: Call, routed: Routed) -> Routed:
        """A miss's or bypass's answer with its ``x-llmroute-cache`` header, stored when
        the lookup allows."""
        held = call.cached
        if held is None:
            return routed
        return kept(self.cache, call, held[0], held[1], routed)


async def placed(call: Call) -> None:
    """The priority place ``admit`` left for later (the fleet was saturated: a hit needs no
    engine, so it does not wait), waited for now that the request goes to an engine (503
    when shed), and the plan ranked again: the fleet moved while it waited."""
    gate = call.rt.priority
    if call.slot is None and call.klass is not None and gate is not None:
        call.slot = await gate.enter(call.klass)
        rank(call)


def scope_of(cache: AnswerCache, caller: Caller | None, d: Decision) -> Scope:
    """The entry scope of a request of ``caller`` planned as ``d``: its tenant, its key
    (with ``cache.per_key``), its strategy and pool."""
    tenant = caller.tenant.id if caller is not None else ""
    key_id = caller.key.id if caller is not None else ""
    route = f"{d.strategy.header}|{d.plan.pool}"
    return Scope(tenant, key_id if cache.cfg.per_key else "", route, key_id)


def hit(cache: AnswerCache, call: Call, d: Decision, found: Lookup, t0: float) -> Routed:
    """The answer of a hit ``found``: JSON, or replayed as SSE for a streamed request;
    ``llmroute_cache_hit_seconds`` times it from ``t0``, the lookup's start
    (``time.perf_counter``)."""
    assert found.entry is not None
    request = call.request
    body = served(found.entry, request, int(cache.now()))
    headers = {"x-request-id": request.request_id, HEADER: found.result,
               FROM_HEADER: found.entry.request_id, "x-llmroute-intent": d.intent.label,
               "x-llmroute-strategy": d.strategy.header,
               "server-timing": ", ".join(call.timing)}
    cache.metrics.hit_seconds.observe(time.perf_counter() - t0)
    if request.stream:
        call.trace.answered(body)  # a JSON answer is noted by ``pipeline.record``
        return Routed(headers, stream=replay(request, body))
    return Routed(headers, body=body)


def kept(cache: AnswerCache, call: Call, scope: Scope, found: Lookup, routed: Routed
         ) -> Routed:
    """``routed`` with its ``x-llmroute-cache`` header, stored when ``found`` allows: a
    JSON answer now, a stream when it ends cleanly."""
    headers = routed.headers | {HEADER: found.result}
    if not found.store:
        return Routed(headers, routed.body, routed.stream)
    request, d = call.request, call.decision
    assert d is not None
    if routed.stream is None:
        if isinstance(routed.body, dict):
            cache.store(found, request, d.intent, scope, routed.body)
        return Routed(headers, body=routed.body)

    def on_answer(body: dict[str, Any]) -> None:
        cache.store(found, request, d.intent, scope, body)
    return Routed(headers, stream=Collected(routed.stream, on_answer,
                                            cache.cfg.max_entry_bytes))
