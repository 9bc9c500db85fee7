"""Quality: a demoted backend gets only its share of the requests it would be offered.

Quality ejection (``fuse/ejection.py``) publishes a ``QualityView`` per demoted backend in
``MetricsSnapshot.quality``: ``cut`` (its share cut, e.g. to 0.25), ``ejected`` (share 0:
out of rotation for a cool-off) and ``probing`` (half-open: a small share, e.g. 0.1, whose
answers decide whether it comes back). A backend with share ``s`` stays a candidate for a
request when the request's slot — a hash of the request id and the backend id, uniform in
[0, 1) — is below ``s``: deterministic for one request (its retries and ``/debug/route``
agree) and, over many requests, that share of them. When that would drop every candidate,
the filter keeps them all (the pool bounds of the ejection keep that rare). Healthy backends
have no view; with none demoted (the common case) the filter returns the list as is.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from llmroute.anchor.protocol import AnchorContext
from llmroute.types import Backend

_SCALE = 1.0 / 2**32


def slot(request_id: str, backend_id: str) -> float:
    """The request's slot for ``backend_id``: CRC-32 of ``request_id:backend_id`` scaled to
    [0, 1) (``zlib.crc32``, in C; uniform enough over random request ids)."""
    return zlib.crc32(f"{request_id}:{backend_id}".encode()) * _SCALE


class QualityFilter:
    """Keeps healthy backends and the demoted ones whose share admits this request (module
    docstring); never empties a non-empty list."""

    def filter(self, ctx: AnchorContext, candidates: Sequence[Backend]) -> list[Backend]:
        """A subset of ``candidates``, order kept."""
        views = ctx.snapshot.quality
        if not views:
            return list(candidates)
        rid, kept = ctx.request.request_id, []
        for b in candidates:
            view = views.get(b.id)
            if view is None or (view.share > 0.0 and slot(rid, b.id) < view.share):
                kept.append(b)
        return kept or list(candidates)
