"""``POST /v1/responses`` (OpenAI Responses), ``GET`` and ``DELETE /v1/responses/{id}``.

The Responses surface (``api/surface.py``) is served by the same ``Exchange`` as
``/v1/chat/completions``: its body becomes the chat request (``api/responses_wire.py``),
the flow serves it unchanged, and the answer leaves as a ``response`` object or the
Responses' events (``api/responses_out.py``). Errors keep OpenAI's shape.

Conversation state: with ``store`` (true unless the client says false, as OpenAI's default)
the finished response and the conversation it ends (as chat messages, without the
instructions) are kept in the router's response store (``state/responses.py``: SQLite, or
the shared Redis with ``state.kind: redis``) under a new id, ``resp_`` and a UUIDv7 — never
the client's request id — before the answer's last byte goes out, so a follow-up naming it
as ``previous_response_id`` finds it on any replica sharing the store. Each record belongs to
the caller's tenant (``""`` with auth off): another tenant's id is answered 404, as an
unknown one, and its content never leaves the store.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
import structlog
from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.errors import new_request_id
from llmroute.api.responses import json_response
from llmroute.api.responses_out import (Draft, ResponseEvents, assistant_message,
                                        response_of)
from llmroute.api.responses_wire import to_chat, validate_responses
from llmroute.api.surface import translated
from llmroute.errors import NotFound, StateUnavailable
from llmroute.flow import pipeline
from llmroute.policy.auth import Caller
from llmroute.runtime import Runtime
from llmroute.types import ChatRequest, Routed

log = structlog.get_logger("llmroute.responses")


class Turn(NamedTuple):
    """What the answer needs of a Responses request: its ``draft`` response, the
    ``conversation`` so far (chat messages, this turn's input last), whether to ``store`` it
    and for which ``owner``."""

    draft: Draft
    conversation: list[dict[str, Any]]
    store: bool
    owner: str


def owner_of(caller: Caller | None) -> str:
    """Whose stored responses a caller sees: its tenant's (``""`` with auth off)."""
    return "" if caller is None else caller.tenant.id


async def stored(rt: Runtime, response_id: str, caller: Caller | None, what: str,
                 param: str | None = None) -> dict[str, Any]:
    """The stored record of ``response_id`` (``{"response", "conversation"}``) if
    ``caller``'s tenant owns it. Raises NotFound (404, naming ``what``) when it is unknown,
    expired, another tenant's, or nothing is stored; StateUnavailable (503)."""
    found = None if rt.responses is None else await rt.responses.get(response_id)
    if found is None or found[0] != owner_of(caller):
        raise NotFound(f"{what} with id {response_id!r} not found.", param=param,
                       code="previous_response_not_found" if param else "not_found")
    record: dict[str, Any] = orjson.loads(found[1])
    return record


class Responses:
    """The OpenAI Responses surface (``api = "responses"``)."""

    api = "responses"

    async def request(self, rt: Runtime, body: Any, request_id: str, caller: Caller | None
                      ) -> tuple[ChatRequest, Turn]:
        """See ``Surface.request``: validate, load the conversation ``previous_response_id``
        names (404 when the caller cannot see it), translate after it."""
        wire = validate_responses(body)
        history: list[dict[str, Any]] = []
        if wire.previous_response_id is not None:
            previous = await stored(rt, wire.previous_response_id, caller, "Previous response",
                                    "previous_response_id")
            history = previous["conversation"]
        chat, turn = to_chat(wire, request_id, history)
        draft = Draft("resp_" + new_request_id(), body, wire.model)
        return chat, Turn(draft, [*history, *turn], wire.store and rt.responses is not None,
                          owner_of(caller))

    async def answer(self, rt: Runtime, request: ChatRequest, turn: Turn, routed: Routed,
                     caller: Caller | None) -> Routed:
        """See ``Surface.answer``: a ``response`` object, or its events; stored first."""
        async def keep(response: dict[str, Any], message: dict[str, Any]) -> None:
            if turn.store:
                await _keep(rt, turn, response, message)

        if routed.stream is None:
            assert routed.body is not None
            response = response_of(routed.body, request, turn.draft)
            await keep(response, assistant_message(response["output"]))
            return Routed(routed.headers, body=response)
        return Routed(routed.headers, stream=translated(
            routed.stream, ResponseEvents(request, turn.draft, keep)))

    def refusal(self, response: Response) -> Response:
        """See ``Surface.refusal``: OpenAI's error shape, as is."""
        return response


async def _keep(rt: Runtime, turn: Turn, response: dict[str, Any],
                message: dict[str, Any]) -> None:
    """Store ``response`` and the conversation it ends; a record over
    ``responses.max_bytes``, or one the store cannot take (StateUnavailable), is not stored
    (logged: the answer itself still goes out whole)."""
    assert rt.responses is not None
    record = orjson.dumps({"response": response,
                           "conversation": [*turn.conversation, message]})
    if len(record) > rt.config.responses.max_bytes:
        log.warning("response_not_stored", response_id=turn.draft.id, bytes=len(record),
                    limit=rt.config.responses.max_bytes)
        return
    try:
        await rt.responses.put(turn.draft.id, turn.owner, record)
    except StateUnavailable as exc:
        log.warning("response_not_stored", response_id=turn.draft.id, reason=exc.message)


async def get_response(request: Request) -> Response:
    """``GET /v1/responses/{response_id}``: a stored response of the caller's tenant.
    Raises AuthenticationFailed (401), NotFound (404), StateUnavailable (503)."""
    rt: Runtime = request.app.state.runtime
    caller = await pipeline.authenticate(rt, request.headers)
    record = await stored(rt, request.path_params["response_id"], caller, "Response")
    return json_response(record["response"])


async def delete_response(request: Request) -> Response:
    """``DELETE /v1/responses/{response_id}``: forget a stored response of the caller's
    tenant. Raises AuthenticationFailed (401), NotFound (404), StateUnavailable (503)."""
    rt: Runtime = request.app.state.runtime
    caller = await pipeline.authenticate(rt, request.headers)
    response_id = request.path_params["response_id"]
    if rt.responses is None or not await rt.responses.delete(response_id, owner_of(caller)):
        raise NotFound(f"Response with id {response_id!r} not found.")
    return json_response({"id": response_id, "object": "response", "deleted": True})
