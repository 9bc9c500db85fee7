"""human: no model answers; the conversation is queued as a ticket for a person.

The client gets an OpenAI-shaped answer at once: ``message`` (``{ticket}`` becomes the
ticket id) with ``finish_reason: stop``, the headers ``x-llmroute-handoff: human`` and
``x-llmroute-ticket: <id>``, and ``"llmroute": {"handoff": {"ticket", "status"}}`` in the
body (a streamed request gets the same answer as SSE, the extension in the final chunk).
Operators list, claim and answer tickets (``/admin/handoffs``, ``llmroute handoffs``); the
client fetches the answer with ``GET /v1/handoffs/{ticket}``.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Literal

from pydantic import Field

from llmroute.errors import NoBackendAvailable
from llmroute.strategy.answers import conversation, text_answer
from llmroute.strategy.handoffs import HandoffStore
from llmroute.strategy.protocol import KindContext, Run, Runner, Scorer, Served
from llmroute.strategy.spec import StrategySpec, version_text
from llmroute.types import ChatRequest, Intent, RoutePlan

POOL = "human"
"""The pool name a hand-off reports (``x-llmroute-pool``, the plan, the trace)."""

DEFAULT_MESSAGE = ("A member of our team will answer this request. Your ticket is {ticket}; "
                   "keep it to fetch the answer.")


class HumanSpec(StrategySpec):
    """``kind: human``: ``message`` is the answer the client gets (``{ticket}`` becomes the
    ticket id)."""

    kind: Literal["human"]
    message: str = Field(DEFAULT_MESSAGE, min_length=1)


def build_human(spec: HumanSpec, ctx: KindContext) -> HumanStrategy:
    """The HumanStrategy a ``human`` file describes, queueing on ``ctx.handoffs``."""
    return HumanStrategy(spec.strategy_id, spec.version, spec.message, ctx.handoffs)


class HumanStrategy(Runner):
    """Queues every request it serves as a ticket in ``store`` and answers ``message``;
    ``strategy_id`` and ``version`` name it on the ticket."""

    def __init__(self, strategy_id: str, version: float, message: str,
                 store: HandoffStore | None):
        self._header = f"{strategy_id}@{version_text(version)}"
        self._message = message
        self._store = store

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan:
        """A plan naming no backend: a person answers."""
        return RoutePlan(POOL, "hand-off to a person", (), (), 1)

    def describe(self, request: ChatRequest, intent: Intent, score: Scorer
                 ) -> dict[str, Any]:
        """``{"message", "queue"}``: the answer text and whether a ticket queue is open."""
        return {"message": self._message, "queue": self._store is not None}

    async def serve(self, run: Run) -> Served:
        """Queue the ticket and answer with ``message``. Raises NoBackendAvailable (503)
        when there is no ticket queue or it cannot be written."""
        if self._store is None:
            raise NoBackendAvailable("hand-off to a person is not available: no ticket queue")
        req = run.request
        try:
            ticket = await self._store.open(self._header, req.request_id, req.endpoint,
                                            req.model, conversation(req), run.now)
        except sqlite3.Error as exc:
            raise NoBackendAvailable(f"the hand-off ticket could not be queued: {exc}") from exc
        run.trace.step("human", ticket=ticket.id)
        body = text_answer(req, self._message.replace("{ticket}", ticket.id), int(run.now),
                           {"handoff": {"ticket": ticket.id, "status": ticket.status}})
        return Served(body, {"x-llmroute-backend": POOL, "x-llmroute-pool": POOL,
                             "x-llmroute-handoff": "human", "x-llmroute-ticket": ticket.id})
