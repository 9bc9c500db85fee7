"""The strategy file's models (docs/strategies.md): the fields every kind shares and ``when``.

A file holds one strategy: ``strategy_id``, ``version`` (a number; a reload applies a
changed file only when it is higher), ``description``, ``priority`` (the highest of the
matching strategies wins, ties by id), ``when`` (the trigger: every given condition must
hold), ``kind`` with that kind's own fields (each kind subclasses ``StrategySpec`` in its own
module) and ``fallback_strategy``. Unknown fields are errors.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class Strict(BaseModel):
    """Frozen, and unknown fields are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Range(Strict):
    """An inclusive range ``min ≤ x ≤ max``; either bound may be left out."""

    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"regex does not compile: {exc}") from exc
    return pattern


class When(Strict):
    """The trigger; every given condition must hold (none given: every request matches).

    ``intents``: the gate's label (or one of a composite request's labels) is one of these;
    ``composite``: the gate did (true) or did not (false) call the request composite;
    ``conflict_above`` / ``confidence_below`` (0–1): the gate's conflict is above / its
    confidence below the value; ``complexity`` (0.1–5.0) and ``prompt_tokens`` (tokens):
    inclusive ranges; ``keywords``: the prompt contains one of them (case-insensitive);
    ``regex``: the prompt matches (Python ``re.search``); ``model``: the request's
    ``model`` is one of these; ``tenant``, ``api_key``, ``priority_class``: the
    authenticated caller's tenant id, key name, priority class is one of these (auth off:
    the ``x-llmroute-tenant``, ``x-llmroute-api-key-name``, ``x-llmroute-priority``
    header); ``budget_left_below`` (0–1): the authenticated caller has a cost budget and
    less than this fraction of it is left (the key's or tenant's, daily or monthly,
    whichever is lowest; never holds with auth off); ``headers``: header name → regex its
    value must match (``re.search``)."""

    intents: tuple[str, ...] = ()
    composite: bool | None = None
    conflict_above: float | None = Field(None, ge=0, le=1)
    confidence_below: float | None = Field(None, ge=0, le=1)
    complexity: Range | None = None
    prompt_tokens: Range | None = None
    keywords: tuple[str, ...] = ()
    regex: str | None = None
    model: tuple[str, ...] = ()
    tenant: tuple[str, ...] = ()
    api_key: tuple[str, ...] = ()
    priority_class: tuple[str, ...] = ()
    budget_left_below: float | None = Field(None, ge=0, le=1)
    headers: dict[str, str] = {}

    @field_validator("regex")
    @classmethod
    def _regex_compiles(cls, pattern: str | None) -> str | None:
        return None if pattern is None else _compiles(pattern)

    @field_validator("headers")
    @classmethod
    def _header_regexes(cls, headers: dict[str, str]) -> dict[str, str]:
        return {name.lower(): _compiles(pattern) for name, pattern in headers.items()}

    @field_validator("keywords")
    @classmethod
    def _no_empty_keyword(cls, words: tuple[str, ...]) -> tuple[str, ...]:
        if any(not w for w in words):
            raise ValueError("a keyword is empty (it would match every prompt)")
        return words


class StrategySpec(Strict):
    """The fields every kind shares; a kind's model subclasses this and adds ``kind`` (a
    ``Literal`` of its name) and its own fields."""

    strategy_id: str = Field(pattern=ID_PATTERN)
    version: float = Field(ge=0, strict=True)
    description: str = ""
    priority: int = 0
    when: When = When()
    kind: str
    fallback_strategy: str | None = None

    def pool_refs(self) -> list[tuple[tuple[Any, ...], str]]:
        """``[(field path, pool name), …]`` this strategy routes to (checked at load)."""
        return []

    def strategy_refs(self) -> list[tuple[tuple[Any, ...], str]]:
        """``[(field path, strategy id), …]`` this strategy serves through (a split's arms;
        checked across files at load)."""
        return []


def version_text(version: float) -> str:
    """A version as the ``x-llmroute-strategy`` header writes it: ``3``, ``3.5``."""
    return str(int(version)) if float(version).is_integer() else repr(float(version))
