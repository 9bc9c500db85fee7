"""A backend's ``quirks:`` in config: overrides of its engine kind's request-body quirks
(the ``Quirks`` row of ``backends/engines.py``, applied by ``backends/quirks.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from llmroute.config.base import Strict

_KEPT = frozenset({"model", "messages", "prompt", "input", "stream"})


class QuirksConfig(Strict):
    """Each field left out keeps the engine kind's value (see ``engines.Quirks`` for what
    each means): ``developer_role``, ``budget_field`` (``max_tokens`` /
    ``max_completion_tokens``), ``tool_call_content`` (``null`` / ``empty`` / ``absent``),
    ``string_content``, ``list_stop``, ``stream_options`` (``always`` / ``streamed``),
    ``tool_choice_object``, ``drop`` (top-level field names never sent, e.g. ``[seed, n]``)."""


    developer_role: bool | None = None
    budget_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    tool_call_content: Literal["null", "empty", "absent"] | None = None
    string_content: bool | None = None
    list_stop: bool | None = None
    stream_options: Literal["always", "streamed"] | None = None
    tool_choice_object: bool | None = None
    drop: tuple[str, ...] | None = None

    @field_validator("drop")
    @classmethod
    def _droppable(cls, drop: tuple[str, ...] | None) -> tuple[str, ...] | None:
        kept = sorted(_KEPT.intersection(drop or ()))
        if kept:
            raise ValueError(f"cannot drop {', '.join(kept)}: every request needs it")
        return drop

    def overrides(self) -> dict[str, Any]:
        """The fields given, as ``Quirks`` field → value (``drop`` a frozenset)."""
        given = self.model_dump(exclude_none=True)
        if "drop" in given:
            given["drop"] = frozenset(given["drop"])
        return given
