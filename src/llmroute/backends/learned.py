"""Quirks learned from the engines' own refusals, per backend (``dispatch/adapt.py`` learns
them; the engine client shapes every later body with them).

A backend's quirks are its engine kind's with its config's overrides (``Backend.shape``,
built once). When an engine refuses a body's form (``backends/refusals.py``), the change is
learned here: the backend gets a new ``Shaper`` from its quirks plus the change, and every
request after it is sent in the form the engine takes, the first time. Entries are keyed by
backend id and kept only for the same backend (a reload that changes the backend's engine,
URL or model starts it afresh). The client consults the map only once it holds an entry:
a router that never met a refusal pays one truth test of an empty dict per request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from llmroute.backends.engines import Quirks
from llmroute.backends.quirks import Shaper, quirks_of, shaper
from llmroute.types import Backend

Body = dict[str, Any]


class LearnedQuirks:
    """Backend id → (the backend as it was, its learned quirks and shaper)."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Backend, Quirks, Shaper | None]] = {}

    def quirks(self, backend: Backend) -> Quirks:
        """``backend``'s quirks: learned ones when there are, else its configured ones."""
        entry = self.entries.get(backend.id) if self.entries else None
        if entry is not None and entry[0] == backend:
            return entry[1]
        return quirks_of(backend.shape)

    def shape(self, backend: Backend) -> Callable[[Body], Body] | None:
        """The shaper for ``backend``'s bodies (learned, else ``backend.shape``)."""
        entry = self.entries.get(backend.id)
        if entry is not None and entry[0] == backend:
            return entry[2]
        return backend.shape

    def learn(self, backend: Backend, change: dict[str, Any]) -> Quirks:
        """Add ``change`` (``Quirks`` field → value) to ``backend``'s quirks; returns them."""
        learned = replace(self.quirks(backend), **change)
        self.entries[backend.id] = (backend, learned, shaper(backend.model, learned))
        return learned

    def view(self) -> dict[str, dict[str, Any]]:
        """Per backend id, the quirk fields that differ from its configured ones."""
        out: dict[str, dict[str, Any]] = {}
        for bid, (backend, learned, _) in self.entries.items():
            base = quirks_of(backend.shape)
            out[bid] = {f: getattr(learned, f) for f in Quirks.__dataclass_fields__
                        if getattr(learned, f) != getattr(base, f)}
        return out


def shaped(learned: LearnedQuirks, backend: Backend, body: Body) -> Body:
    """The body sent to ``backend``: ``body`` shaped by its quirks (learned ones first), with
    ``model`` the served model name."""
    shape = learned.shape(backend) if learned.entries else backend.shape
    return {**body, "model": backend.model} if shape is None else shape(body)
