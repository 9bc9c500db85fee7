"""Graceful shutdown (``llmroute serve`` on SIGTERM): the drain.

On SIGTERM the router first *drains* for ``server.drain_delay_s`` seconds: it keeps
listening, but ``/ready`` answers 503 (so a load balancer or a Kubernetes readiness probe
stops sending it traffic) and every new request to the OpenAI endpoints gets an OpenAI-shaped
503 ``server_shutting_down`` with ``Retry-After`` and ``connection: close`` (the client's
retry lands on another replica), while requests and streams already accepted go on. Then it
stops listening and waits up to ``server.drain_timeout_s`` for what is still in flight;
whatever is left after that is cancelled (its stream ends). Local engines stop last, and the
process exits 0. A second SIGTERM or a SIGINT (Ctrl-C) skips the remaining delay; a second
SIGINT stops at once.

Cost on the request path: one attribute test per request.
"""

from __future__ import annotations

import time

DRAIN_RETRY_AFTER_S = 1.0
"""``Retry-After`` (s) on requests refused while draining: a retry goes to another replica
through the load balancer at once; one second leaves it time to take this one out."""


class Drain:
    """Whether this server is draining (``active``) and since when (``since``,
    ``time.monotonic`` s; None while serving normally)."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since: float | None = None

    @property
    def active(self) -> bool:
        """True once the drain has begun."""
        return self.since is not None

    def begin(self, now: float | None = None) -> bool:
        """Start draining at ``now`` (default: ``time.monotonic()``); False when it already
        had begun (the first start time is kept)."""
        if self.since is not None:
            return False
        self.since = time.monotonic() if now is None else now
        return True

    def elapsed(self, now: float) -> float:
        """Seconds since the drain began (0 while serving normally)."""
        return 0.0 if self.since is None else max(now - self.since, 0.0)
