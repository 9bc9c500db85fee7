"""``GET /debug/strategies``: the loaded strategy set and the last reload's outcome.

Answers ``{"dir", "builtin", "strategies": [{"strategy_id", "version", "header", "kind",
"priority", "description", "source", "when", "fallback_strategy"}, …], "last_reload":
{"outcome", "at", "messages", "applied", "retired", "refused"}, "trials": {split or shadow
strategy id: {"kind", "arms": {arm strategy id: {"role", "requests", "errors",
"error_rate", "p95_ms", "quality", "dropped"}}}}}``; strategies best first (the order
matching tries them in); ``when`` lists only the conditions given. A trial's arms are the
loaded split's (``role``: ``baseline`` — the first arm, a shadow's primary — or
``candidate``), measured since start (``strategy/trials.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.responses import json_response
from llmroute.runtime import Runtime
from llmroute.strategy.snapshot import Entry
from llmroute.strategy.split import TrialStrategy
from llmroute.strategy.trials import ArmTally


async def debug_strategies(request: Request) -> Response:
    """The current strategy set and ``status`` of the strategy book."""
    rt: Runtime = request.app.state.runtime
    book = rt.strategy
    current = book.current
    return json_response({
        "dir": book.directory,
        "builtin": current.builtin.header,
        "strategies": [_entry(e) for e in current.entries],
        "last_reload": asdict(book.status),
        "trials": trials(current.entries, book.trials.summary()),
    })


def trials(entries: Sequence[Entry], measured: dict[str, dict[str, dict[str, Any]]]
           ) -> dict[str, Any]:
    """Each loaded split or shadow strategy's arms with what was measured of them."""
    out: dict[str, Any] = {}
    for e in entries:
        if not isinstance(e.strategy, TrialStrategy):
            continue
        arms = [*e.strategy.arms, *filter(None, [e.strategy.candidate])]
        seen = measured.get(e.spec.strategy_id, {})
        out[e.spec.strategy_id] = {"kind": e.spec.kind, "arms": {
            arm: {"role": "baseline" if i == 0 else "candidate",
                  **(seen.get(arm) or ArmTally().summary())} for i, arm in enumerate(arms)}}
    return out


def _entry(e: Entry) -> dict[str, Any]:
    spec = e.spec
    return {"strategy_id": spec.strategy_id, "version": spec.version, "header": e.header,
            "kind": spec.kind, "priority": spec.priority, "description": spec.description,
            "source": e.source, "when": spec.when.model_dump(exclude_defaults=True),
            "fallback_strategy": spec.fallback_strategy}
