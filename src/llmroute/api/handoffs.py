"""The hand-off tickets of the ``human`` strategy kind, for operators and for clients.

Operators (behind the admin key when auth is on, see ``admin.operator``):

* ``GET /admin/handoffs[?status=open|claimed|answered&limit=N]`` — ``{"object": "list",
  "data": [ticket, …]}``, newest first (``limit`` 1–1000, default 100);
* ``GET /admin/handoffs/{ticket}`` — one ticket (404 ``ticket_not_found``);
* ``POST /admin/handoffs/{ticket}/claim`` — ``{"operator"?}`` (JSON, ``{}`` will do) → the
  claimed ticket;
* ``POST /admin/handoffs/{ticket}/answer`` — ``{"answer", "operator"?}`` → the answered
  ticket (400 ``ticket_answered`` when it was answered already).

Clients (any valid API key when auth is on): ``GET /v1/handoffs/{ticket}`` — ``{"object":
"handoff", "id", "status", "created_at", "answered_at", "answer"}``, where ``answer`` is
a ``chat.completion`` with the operator's text once the ticket is answered, else null.
A ticket is a ``Ticket.to_json()`` object (``strategy/handoffs.py``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from llmroute.flow import pipeline
from llmroute.api.body import read_json
from llmroute.api.responses import json_response
from llmroute.errors import InvalidRequest, NotFound
from llmroute.runtime import Runtime
from llmroute.strategy.handoffs import HandoffStore, Ticket


class ClaimIn(BaseModel):
    """``POST /admin/handoffs/{ticket}/claim`` body: ``{"operator"?}``."""

    model_config = ConfigDict(extra="forbid")
    operator: str = Field("operator", min_length=1, max_length=256)


class AnswerIn(ClaimIn):
    """``POST /admin/handoffs/{ticket}/answer`` body: ``{"answer", "operator"?}``."""

    answer: str = Field(min_length=1)


async def list_handoffs(request: Request) -> Response:
    """``GET /admin/handoffs``: tickets, newest first."""
    store = _store(request)
    limit = request.query_params.get("limit", "100")
    if not limit.isdigit() or not 1 <= int(limit) <= 1000:
        raise InvalidRequest("limit must be a whole number from 1 to 1000", param="limit")
    tickets = await store.list(request.query_params.get("status"), int(limit))
    return json_response({"object": "list", "data": [t.to_json() for t in tickets]})


async def show_handoff(request: Request) -> Response:
    """``GET /admin/handoffs/{ticket}``: one ticket."""
    ticket = await _store(request).get(request.path_params["ticket"])
    return json_response(ticket.to_json())


async def claim_handoff(request: Request) -> Response:
    """``POST /admin/handoffs/{ticket}/claim``: an operator takes the ticket."""
    rt: Runtime = request.app.state.runtime
    spec = await _body(request, ClaimIn)
    ticket = await _store(request).claim(request.path_params["ticket"], spec.operator,
                                         rt.wall_clock())
    return json_response(ticket.to_json())


async def answer_handoff(request: Request) -> Response:
    """``POST /admin/handoffs/{ticket}/answer``: an operator answers the ticket."""
    rt: Runtime = request.app.state.runtime
    spec = await _body(request, AnswerIn)
    ticket = await _store(request).answer(request.path_params["ticket"], spec.answer,
                                          spec.operator, rt.wall_clock())
    return json_response(ticket.to_json())


async def fetch_handoff(request: Request) -> Response:
    """``GET /v1/handoffs/{ticket}``: the client's view of its ticket and, once answered,
    the answer as a chat completion."""
    rt: Runtime = request.app.state.runtime
    await pipeline.authenticate(rt, request.headers)
    ticket = await _store(request).get(request.path_params["ticket"])
    return json_response({"object": "handoff", "id": ticket.id, "status": ticket.status,
                          "created_at": ticket.created_at, "answered_at": ticket.answered_at,
                          "answer": client_answer(ticket)})


def client_answer(ticket: Ticket) -> dict[str, Any] | None:
    """An answered ticket's answer as a ``chat.completion`` (None while unanswered)."""
    if ticket.answer is None:
        return None
    return {"id": f"chatcmpl-{ticket.id}", "object": "chat.completion",
            "created": int(ticket.answered_at or ticket.created_at), "model": ticket.model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": ticket.answer}}],
            "llmroute": {"handoff": {"ticket": ticket.id, "status": ticket.status,
                                     "answered_by": ticket.answered_by}}}


async def _body(request: Request, model: type[ClaimIn]) -> Any:
    rt: Runtime = request.app.state.runtime
    raw = await read_json(request.receive, request.headers.get("content-type"),
                          request.headers.get("content-length"),
                          rt.config.server.max_body_bytes)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidRequest(f"bad hand-off {model.__name__[:-2].lower()}: {first['msg']}",
                             param=".".join(str(p) for p in first["loc"]) or None) from exc


def _store(request: Request) -> HandoffStore:
    store = request.app.state.runtime.handoffs
    if store is None:
        raise NotFound("this router keeps no hand-off tickets", code="not_found")
    return store
