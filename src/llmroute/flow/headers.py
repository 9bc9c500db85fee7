"""Every response header the flow writes, in one place: ``x-request-id``, the
``x-llmroute-*`` headers describing the route, and ``server-timing``.

A strategy kind's own headers (``x-llmroute-cascade``, ``x-llmroute-verified``, …) come
with its answer (``strategy.protocol.Served.headers``); the admission's ``x-ratelimit-*``
with its ticket (``policy/limits.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmroute.flow.call import Call
from llmroute.policy.priority import HEADER as PRIORITY, PriorityClass
from llmroute.strategy.protocol import Trial
from llmroute.types import Backend, ChatRequest


def route_headers(call: Call, backend: Backend) -> dict[str, str]:
    """A request dispatch served: ``x-request-id``, the backend and pool that answered, the
    intent, ``x-llmroute-strategy: <strategy_id>@<version>`` and ``server-timing``."""
    assert call.intent is not None and call.matched is not None
    headers = {"x-request-id": call.request.request_id, "x-llmroute-backend": backend.id,
               "x-llmroute-pool": backend.pool, "x-llmroute-intent": call.intent.label,
               "x-llmroute-strategy": call.matched.header}
    if call.timing:
        headers["server-timing"] = ", ".join(call.timing)
    return headers


def strategy_headers(call: Call, header: str, failed: Sequence[str]) -> dict[str, str]:
    """A request a strategy serves itself (``header``: ``<strategy_id>@<version>``), after
    the strategies in ``failed`` (``x-llmroute-fallback-from``, when any) failed; and
    ``server-timing``."""
    assert call.intent is not None
    headers = {"x-request-id": call.request.request_id, "x-llmroute-intent": call.intent.label,
               "x-llmroute-strategy": header}
    if call.timing:
        headers["server-timing"] = ", ".join(call.timing)
    if failed:
        headers["x-llmroute-fallback-from"] = ", ".join(failed)
    return headers


def backend_headers(backend: Backend) -> dict[str, str]:
    """The backend that answered and its pool."""
    return {"x-llmroute-backend": backend.id, "x-llmroute-pool": backend.pool}


def embeddings_headers(request: ChatRequest, backend: Backend) -> dict[str, str]:
    """An embeddings request: ``x-request-id`` and the backend that answered."""
    return {"x-request-id": request.request_id, **backend_headers(backend)}


def trial_headers(trial: Trial) -> dict[str, str]:
    """The split or shadow strategy (``<strategy_id>@<version>``) and the arm serving."""
    return {"x-llmroute-trial": trial.header, "x-llmroute-arm": trial.arm}


def priority_header(klass: PriorityClass) -> dict[str, str]:
    """The priority class the request ran in."""
    return {PRIORITY: klass.name}


def timing_entry(step: str, ms: float) -> str:
    """One entry of the W3C Server-Timing header (https://www.w3.org/TR/server-timing/):
    ``step``'s time in ms, e.g. ``gate;dur=3.214`` (``Call.timing`` holds them; the header
    lists them comma-separated). Browsers' developer tools show it, and
    ``bench/overhead.py`` reads the gate's own time from it."""
    return f"{step};dur={ms:.3f}"
