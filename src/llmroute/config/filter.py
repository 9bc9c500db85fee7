"""The ``content_filter:`` section of the configuration (the sensitive-word filter,
docs/content-filter.md).

Each list is a UTF-8 text file, one word or phrase a line (blank lines and lines starting
with ``#`` are skipped), with its own ``action`` and ``mode``. Without lists nothing is
added to the request path.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from llmroute.config.base import Strict

Action = Literal["block", "mask", "flag"]
"""``block``: refuse the request (400 ``content_filter``) / end the answer with
``finish_reason: "content_filter"``; ``mask``: replace the match with ``*``s; ``flag``:
count, log and trace only."""

Mode = Literal["substring", "word"]
"""``substring``: anywhere; ``word``: only between non-word characters (letters, digits and
``_`` are word characters), e.g. ``ass`` in ``an ass`` but not in ``class``."""


class WordListConfig(Strict):
    """One word list: ``name`` (the metric and trace label), the file ``path`` (relative:
    from the config file's folder), what to do on a match, where to match, and which
    directions it applies to (``input``: the request's text and tool-call arguments,
    ``output``: the answer's text, streamed or not)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    path: str = Field(min_length=1)
    action: Action = "block"
    mode: Mode = "substring"
    applies_to: tuple[Literal["input", "output"], ...] = Field(("input", "output"),
                                                                min_length=1)


class ContentFilterConfig(Strict):
    """The sensitive-word filter: ``lists`` (none: the filter is off), reloaded when a file
    changes with ``watch``. An entry longer than ``max_word_chars`` (after normalisation)
    makes its list invalid: a streamed answer holds back at most that much text."""

    lists: tuple[WordListConfig, ...] = ()
    watch: bool = True
    max_word_chars: int = Field(64, ge=1, le=1024)

    @field_validator("lists")
    @classmethod
    def _unique_names(cls, v: tuple[WordListConfig, ...]) -> tuple[WordListConfig, ...]:
        names = [w.name for w in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate list names: {', '.join(dup)}")
        return v
