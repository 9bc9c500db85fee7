"""A pool's ``price:``: what a million tokens cost there, in and out, in any one currency
unit the operator chooses (dollars, euros, credits — the router only adds them up).

Prices are strict numbers: a quoted string (``"0.5"``), a boolean, ``.nan`` or ``.inf`` is
a config error naming ``file:line: field``, as is a negative price.
"""

from __future__ import annotations

from pydantic import Field

from llmroute.config.base import Strict


class PriceConfig(Strict):
    """``input_per_mtok``: the price of one million prompt tokens; ``output_per_mtok``: of
    one million completion tokens (same currency unit; ≥ 0, finite)."""

    input_per_mtok: float = Field(ge=0, strict=True, allow_inf_nan=False)
    output_per_mtok: float = Field(ge=0, strict=True, allow_inf_nan=False)
