"""``GET /debug/route?query=…``: what the router would do with a prompt, sending nothing.

Answers ``{"query", "intent": {label, confidence, runners_up, conflict, entropy, composite,
source, wins: [{pool, probability, rank}, …]}, "complexity", "strategy": {strategy_id, version, kind, header}, "plan": {pool,
reason, backend_ids, fallback_ids, max_attempts}, "backend", "candidates": [{"backend",
"score", "scores", "predicted_ms"}, …], "predicted_ms": {"ttft", "per_output_token",
"latency"}, "detail": {"kind", …}, "trial": null | {…}}``; ``backend`` is the
would-be first choice and ``predicted_ms`` its predicted latency in ms for the query's
prompt and an ``output_tokens``-token answer (query parameter, default 256; each candidate
has its own: ``anchor/predict.py``; null where the router has not seen the backend yet); ``detail`` is the serving strategy's own multi-step plan (its kind's
``describe()``: pipeline steps, cascade pools and the pool this query would start on, fusion
voters, verify's check, human's message …) and ``trial`` the split or shadow that picked
it (arms and shares, the arm this query takes and its sticky key; see
``StrategySet.describe``). The strategy triggers read this request's own headers
(``x-llmroute-tenant`` …). A missing ``query`` is a 400 (InvalidRequest).
"""

from __future__ import annotations

from dataclasses import fields

from starlette.requests import Request
from starlette.responses import Response

from llmroute.anchor.predict import predicted_ms
from llmroute.api.responses import json_response
from llmroute.errors import InvalidRequest
from llmroute.flow import pipeline
from llmroute.flow.call import Call
from llmroute.flow.legs import PoolLegs
from llmroute.gate.compress import prompt_request
from llmroute.observe.trace import Recorder
from llmroute.runtime import Runtime
from llmroute.strategy.snapshot import StrategySet

_NOT_SHOWN = frozenset({"complexity", "embedding", "wins"})
"""Intent fields the answer shows apart (``complexity``, ``wins``) or never: ``embedding``, the
encoder's vector (a numpy array, no JSON; the cache's business, not a reader's)."""


async def debug_route(request: Request) -> Response:
    """Classify and plan ``query`` like a ``model: auto`` chat request; send nothing."""
    rt: Runtime = request.app.state.runtime
    query = request.query_params.get("query")
    if query is None:
        raise InvalidRequest("query parameter 'query' is required", param="query")
    output = _output_tokens(request.query_params.get("output_tokens"))
    call = Call(rt, prompt_request(query), headers=request.headers)
    d = await pipeline.decide(call)
    s, intent = d.strategy, d.intent
    view = _describe(call)
    stats = rt.stats.snapshot(rt.clock()).stats
    predicted = [predicted_ms(stats.get(c.backend.id), call.request.prompt_tokens, output)
                 for c in d.candidates]
    return json_response({
        "query": query,
        "intent": {**{f.name: getattr(intent, f.name) for f in fields(intent)
                      if f.name not in _NOT_SHOWN},
                   "wins": [w._asdict() for w in intent.wins]},
        "complexity": intent.complexity,
        "strategy": {"strategy_id": s.strategy_id, "version": s.version, "kind": s.kind,
                     "header": s.header},
        "plan": d.plan._asdict(),
        "backend": d.candidates[0].backend.id if d.candidates else None,
        "predicted_ms": predicted[0] if predicted else None,
        "candidates": [{"backend": c.backend.id, "score": round(c.score, 4),
                        "scores": {k: round(v, 4) for k, v in c.scores.items()},
                        "predicted_ms": p} for c, p in zip(d.candidates, predicted)],
        **view,
    })


def _output_tokens(raw: str | None) -> int:
    """The ``output_tokens`` query parameter (default 256). Raises InvalidRequest (400)
    unless it is a whole number from 1 to 1,000,000."""
    if raw is None:
        return 256
    if not raw.isdigit() or not 1 <= int(raw) <= 1_000_000:
        raise InvalidRequest("query parameter 'output_tokens' must be a whole number from 1 "
                             "to 1000000", param="output_tokens")
    return int(raw)


def _describe(call: Call) -> dict[str, object]:
    """``{"detail", "trial"}`` of the strategy ``call`` matched; anchor scores as a leg
    sees them."""
    matched, intent = call.matched, call.intent
    assert matched is not None and intent is not None
    snapshot = matched.snapshot
    if not isinstance(snapshot, StrategySet):
        return {"detail": None, "trial": None}
    chat = call.request
    legs = PoolLegs(call.rt, intent, 0, Recorder(chat.request_id, chat.request_id))
    return snapshot.describe(matched, chat, intent, legs.best_score, call.headers,
                             pipeline.asker(call))
