"""Learning a quirk from an engine's refusal: one adapted retry, remembered for the backend.

When an engine refuses a request for a shape it does not take (``backends/refusals.py``:
a ``developer`` message, a list ``stop``, text parts, ``content: null`` on a tool-call turn,
``stream_options`` on a non-streamed call), ``adapted`` learns the quirk for that backend
(``backends/learned.py``: every later body goes out in the form the engine takes), counts it
(``llmroute_quirks_learned_total{backend, quirk}``), logs it once (``quirk_learned``, with
the request id), and failover sends the same request to the same backend once more,
reshaped. Nothing else is retried: any other refusal is the client's answer, as before.
One adaptation per ``Budget`` at most (a stream's handoffs share it), so a request is never
reshaped twice. Nothing runs before a refusal: the plain path pays nothing.
"""

from __future__ import annotations

from typing import Any

import structlog

from llmroute.backends.quirks import quirks_of
from llmroute.backends.refusals import recognise
from llmroute.dispatch.attempt import Budget
from llmroute.dispatch.deps import Deps
from llmroute.errors import BackendError
from llmroute.types import Backend

log = structlog.get_logger("llmroute.dispatch")


def adapted(deps: Deps, budget: Budget, backend: Backend, body: dict[str, Any],
            err: BackendError) -> bool:
    """True when ``err`` is ``backend``'s engine refusing a shape ``body`` had and the quirk
    is now learned (by this request, or by a concurrent one a moment ago): the request should
    go to ``backend`` once more. False when ``budget`` already adapted once, or ``err`` is no
    such refusal."""
    if budget.adapted:
        return False
    learned = deps.client.learned
    now = learned.quirks(backend)
    found = recognise(err, body, now)
    if found is None:  # refused in the old form while another request learned the new one
        found = recognise(err, body, quirks_of(backend.shape))
        if found is None or any(getattr(now, k) != v for k, v in found[1].items()):
            return False
        budget.adapted = True
        return True
    budget.adapted = True
    name, change = found
    learned.learn(backend, change)
    deps.metrics.quirks_learned.labels(backend.id, name).inc()
    log.warning("quirk_learned", backend=backend.id, quirk=name, change=change,
                request_id=budget.request_id, error=err.message)
    return True
