"""``POST /v1/embeddings``: routed by ``model`` to the backends configured with
``mode: embeddings``; no gate and no strategy (an embedding has no intent to read).

``model`` names an embeddings pool, a served model name of an embeddings backend, or
``auto`` (the one embeddings pool; an error when there are several). The pool's backends are
ranked by the anchor like a chat pool's (the request's size is its input's estimated tokens)
and tried with failover within the retry budget; the engine's JSON answer (``data``,
``usage``) is returned as it came, with ``model`` as the client named it. Keys, limits and
quotas apply through ``pipeline.route`` as for chat: the answer's ``usage.total_tokens``
is what a token limit is charged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmroute import dispatch
from llmroute.errors import InvalidRequest, ModelNotFound
from llmroute.observe.trace import Recorder
from llmroute.flow.pipeline import Routed, rank
from llmroute.policy.auth import Caller
from llmroute.runtime import Runtime
from llmroute.types import Backend, ChatRequest, Intent, RoutePlan

EMBED = Intent("embeddings", 1.0, source="endpoint")
"""The intent an embeddings request carries through the anchor (it is never classified)."""


async def serve_embeddings(rt: Runtime, request: ChatRequest, caller: Caller | None,
                           headers: Mapping[str, str], trace: Recorder | None) -> Routed:
    """Plan, rank and send an embeddings ``request`` (``pipeline.Server``). Raises
    ModelNotFound (404) or InvalidRequest (400) for a ``model`` no embeddings backend
    serves, PermissionDenied (403) for a pool ``caller``'s key may not use, and as
    ``dispatch.complete`` does."""
    plan = embedding_plan(rt.backends, request.model, rt.config.retry.max_attempts)
    if caller is not None:
        caller.check_pool(plan.pool)
    trace = trace or Recorder(request.request_id, request.request_id)
    trace.strategy("embeddings", "embeddings", plan.pool)
    candidates = rank(rt, request, EMBED, plan, explain=False)
    trace.anchor(candidates)
    backend, body = await dispatch.complete(rt.dispatch, request, plan, candidates, trace)
    trace.answered(body)
    return Routed(_headers(request, backend), body=_named(body, request.model))


def embedding_plan(backends: Mapping[str, Backend], model: str, max_attempts: int
                   ) -> RoutePlan:
    """The plan for an embeddings request naming ``model``: a pool's backends, or the
    backends serving that model name, in config order. Raises ModelNotFound or
    InvalidRequest (``auto`` with several embeddings pools)."""
    embedders = [b for b in backends.values() if b.mode == "embeddings"]
    pools = list(dict.fromkeys(b.pool for b in embedders))
    if model == "auto" and len(pools) == 1:
        model = pools[0]
    elif model == "auto":
        raise InvalidRequest("model 'auto' is ambiguous for embeddings: name one of "
                             f"{', '.join(pools) or '(none configured)'}", param="model")
    if model in pools:
        ids = tuple(b.id for b in embedders if b.pool == model)
        return RoutePlan(model, f"embeddings pool {model}", ids, max_attempts=max_attempts)
    served = tuple(b.id for b in embedders if b.model == model)
    if served:
        return RoutePlan(backends[served[0]].pool, f"embeddings model {model}", served,
                         max_attempts=max_attempts)
    raise ModelNotFound(f"No embeddings model '{model}': use an embeddings pool "
                        f"({', '.join(pools) or 'none configured'}) or its served model "
                        "name", param="model")


def _headers(request: ChatRequest, backend: Backend) -> dict[str, str]:
    return {"x-request-id": request.request_id, "x-llmroute-backend": backend.id,
            "x-llmroute-pool": backend.pool}


def _named(body: dict[str, Any], model: str) -> dict[str, Any]:
    """The engine's answer with ``model`` as the client asked for it."""
    return {**body, "model": model} if isinstance(body, dict) else body
