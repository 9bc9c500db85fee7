"""``POST /v1/embeddings``: routed by ``model`` to the backends configured with
``mode: embeddings``; no gate and no strategy (an embedding has no intent to read).

``model`` names an embeddings pool, a served model name of an embeddings backend, or
``auto`` (the one embeddings pool; an error when there are several). The pool's backends are
ranked by the anchor like a chat pool's (the request's size is its input's estimated tokens)
and tried with failover within the retry budget; the engine's JSON answer (``data``,
``usage``) is returned as it came, with ``model`` as the client named it. Keys, limits and
quotas apply as for chat (``pipeline.admit``, the usage meter stage): the answer's
``usage.total_tokens`` is what a token limit is charged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmroute.dispatch import Budget, send
from llmroute.errors import InvalidRequest, ModelNotFound
from llmroute.flow.call import Call
from llmroute.flow.headers import embeddings_headers
from llmroute.flow.pipeline import admit, record
from llmroute.flow.rank import rank
from llmroute.flow.stages import abandon, around
from llmroute.strategy.protocol import Matched
from llmroute.types import Backend, Intent, Routed, RoutePlan

EMBED = Intent("embeddings", 1.0, source="endpoint")
"""The intent an embeddings request carries through the anchor (it is never classified)."""


async def route_embeddings(call: Call) -> Routed:
    """Serve an embeddings ``call`` (a ``call.Flow``): admit, plan, rank, the answer inside
    the answer stages, record. Raises ModelNotFound (404) or InvalidRequest (400) for
    a ``model`` no embeddings backend serves, PermissionDenied (403) for a pool the caller's
    key may not use, and as ``pipeline.route`` does."""
    try:
        await admit(call)
        plan(call)
        rank(call)
        return record(call, await around(call, _answer))
    except BaseException as err:
        await abandon(call, err)
        raise


def plan(call: Call) -> None:
    """``call.matched``: the embeddings plan of the model the request names (the
    ``embeddings`` strategy, noted in the trace), its pool checked against the caller."""
    rt, request = call.rt, call.request
    chosen = embedding_plan(rt.backends, request.model, rt.config.retry.max_attempts)
    if call.caller is not None:
        call.caller.check_pool(chosen.pool)
    call.intent = EMBED
    call.matched = Matched("embeddings", 0, "embeddings", "embeddings", chosen, None)
    call.trace.strategy("embeddings", "embeddings", chosen.pool)


async def _answer(call: Call) -> Routed:
    """The ranked plan through dispatch; the engine's answer with ``model`` as the client
    named it."""
    d = call.decision
    assert d is not None
    sent = await send(call.rt.dispatch, call.request, d.plan,
                      Budget(d.candidates, d.plan.max_attempts, call.trace))
    assert sent.body is not None
    return Routed(embeddings_headers(call.request, sent.backend),
                  body=_named(sent.body, call.request.model))


def embedding_plan(backends: Mapping[str, Backend], model: str, max_attempts: int
                   ) -> RoutePlan:
    """The plan for an embeddings request naming ``model``: a pool's backends, or the
    backends serving that model name, in config order. Raises ModelNotFound (404: no
    embeddings backend at all, or none serving ``model``) or InvalidRequest (``auto`` with
    several embeddings pools)."""
    embedders = [b for b in backends.values() if b.mode == "embeddings"]
    if not embedders:
        raise ModelNotFound("No embeddings backend is configured: /v1/embeddings is served "
                            "by backends with 'mode: embeddings'", param="model")
    pools = list(dict.fromkeys(b.pool for b in embedders))
    if model == "auto" and len(pools) == 1:
        model = pools[0]
    elif model == "auto":
        raise InvalidRequest("model 'auto' is ambiguous for embeddings: name one of "
                             f"{', '.join(pools)}", param="model")
    if model in pools:
        ids = tuple(b.id for b in embedders if b.pool == model)
        return RoutePlan(model, f"embeddings pool {model}", ids, max_attempts=max_attempts)
    served = tuple(b.id for b in embedders if b.model == model)
    if served:
        return RoutePlan(backends[served[0]].pool, f"embeddings model {model}", served,
                         max_attempts=max_attempts)
    raise ModelNotFound(f"No embeddings model '{model}': use an embeddings pool "
                        f"({', '.join(pools)}) or its served model name", param="model")


def _named(body: dict[str, Any], model: str) -> dict[str, Any]:
    """The engine's answer with ``model`` as the client asked for it."""
    return {**body, "model": model} if isinstance(body, dict) else body
