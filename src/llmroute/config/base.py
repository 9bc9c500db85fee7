"""``Strict``: the one base of every config model — unknown fields are errors (``extra:
forbid``, so a typo names ``file:line: field``) and a loaded config is immutable
(``frozen``), safe to share between the request path and a reload."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A config section: no unknown fields, frozen once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)
