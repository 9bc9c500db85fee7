"""Dispatch: send a ranked request to its candidates and bring back the answer.

One door, ``send`` (``serve.py``), for every caller: a plain request, each leg of a strategy
and an embeddings request all pass the pool's degradation tier, the capability checks, the
frozen-engine watchdog and the prefix-affinity record. Inside, one home per concern, each
importing only those listed before it (no circle):

* ``deps.py`` — ``Deps``, the narrow record of what dispatch uses (built with the Runtime);
* ``attempt.py`` — one attempt's accounting from ``begin`` to its one end, and the
  request's attempt ``Budget`` (the caller builds it over its ranked candidates);
* ``watchdog.py`` — the TTFT bound of a non-streamed call on an engine gone dark;
* ``adapt.py`` — one reshaped retry after an engine refuses a body's shape, the quirk
  learned for the backend;
* ``failover.py`` — ``with_failover``: the candidates in order until one answers, before
  the first byte;
* ``relay.py`` — the streaming relay: one client stream across backends, the result fuse
  and its handoffs;
* ``serve.py`` — ``send`` and what it brings back (``Sent``).

Nothing outside ``dispatch/`` imports ``attempt``, ``failover`` or ``relay``.
"""

from llmroute.dispatch.attempt import Budget
from llmroute.dispatch.deps import Deps
from llmroute.dispatch.serve import Sent, asks_logprobs, send

__all__ = ["Budget", "Deps", "Sent", "asks_logprobs", "send"]
