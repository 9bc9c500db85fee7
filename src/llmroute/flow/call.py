"""``Call``: one request on its way through the flow, the record every step reads and fills
(GIE's request context), and the ``Decision`` its ``rank`` step makes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple

from llmroute.cache.answers import Lookup, Scope
from llmroute.observe.trace import Recorder
from llmroute.policy.auth import Caller
from llmroute.policy.limits import Ticket
from llmroute.policy.priority import PriorityClass, Slot
from llmroute.runtime import Runtime
from llmroute.strategy.protocol import NO_HEADERS, Matched
from llmroute.types import Candidate, ChatRequest, Intent, Routed, RoutePlan


class Decision(NamedTuple):
    """What the router would do for a request, without sending it: the gate's ``intent``,
    the ``plan`` of the ``strategy`` that planned it (with the strategy set it was matched
    against) and the plan's backends ranked, ``candidates``."""

    intent: Intent
    plan: RoutePlan
    candidates: list[Candidate]
    strategy: Matched


class Call:
    """One request (``flow/pipeline.py`` runs the steps over it). A slotted class, made once
    per request and filled in place as the steps run.

    Given: ``rt`` the Runtime serving it, ``request`` (replaced as the input filter masks it
    and the token count measures it), ``caller`` (None: auth off), ``headers`` (the inbound
    HTTP headers, read by the strategy triggers and the priority header), ``trace`` (the
    request's Recorder; a throwaway one when None is given).

    Filled by the steps: ``klass`` the priority class (``admit``, classified once; None
    without classes), ``ticket`` the token reservation and ``slot`` the priority place
    (``admit``; None with auth off, without classes), ``intent`` (the gate), ``timing`` the
    ``server-timing`` header's entries (``headers.timing_entry``: ``["gate;dur=3.214"]``),
    ``matched`` the strategy and its plan (``choose``), ``decision`` the plan ranked
    (``rank``).

    Held for the answer stages (``flow/stages.py``): ``trial_t0`` when a split's or shadow's
    arm began serving (its clock, s); ``cached`` the answer cache's entry scope and lookup
    (``flow/cache.py``; None: not looked up). A new stage that must hold something per
    request adds its field here.
    """

    __slots__ = ("rt", "request", "caller", "headers", "trace", "klass", "ticket", "slot",
                 "intent", "timing", "matched", "decision", "trial_t0",
                 "cached")

    def __init__(self, rt: Runtime, request: ChatRequest, caller: Caller | None = None,
                 headers: Mapping[str, str] = NO_HEADERS, trace: Recorder | None = None):
        self.rt = rt
        self.request = request
        self.caller = caller
        self.headers = headers
        self.trace = trace if trace is not None else Recorder(request.request_id,
                                                              request.request_id)
        self.klass: PriorityClass | None = None
        self.ticket: Ticket | None = None
        self.slot: Slot | None = None
        self.intent: Intent | None = None
        self.timing: list[str] = []
        self.matched: Matched | None = None
        self.decision: Decision | None = None
        self.trial_t0: float | None = None
        self.cached: tuple[Scope, Lookup] | None = None


Flow = Callable[[Call], Awaitable[Routed]]
"""How a Call is served: a whole flow (``pipeline.route``, ``embeddings.route_embeddings``)
or the answer inside the stages (``strategies.answer``)."""
