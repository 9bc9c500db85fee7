"""Dispatch: send a ranked request to its candidates and bring back the answer.

One home per concern, each importing only those listed before it (no circle):

* ``deps.py`` — ``Deps``, the narrow record of what dispatch uses (built with the Runtime);
* ``attempt.py`` — one attempt's accounting from ``begin`` to its one end, and the
  request's attempt ``Budget``;
* ``adapt.py`` — one reshaped retry after an engine refuses a body's shape, the quirk
  learned for the backend;
* ``failover.py`` — ``with_failover``: the candidates in order until one answers, before
  the first byte;
* ``relay.py`` — the streaming relay: one client stream across backends, the result fuse
  and its handoffs;
* ``serve.py`` — the public ``complete`` (JSON) and ``open_stream`` (SSE), after the pool's
  degradation tier.
"""

from llmroute.dispatch.deps import Deps
from llmroute.dispatch.serve import complete, open_stream

__all__ = ["Deps", "complete", "open_stream"]
